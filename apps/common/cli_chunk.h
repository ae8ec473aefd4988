// --chunk-mib for seedd and seedctl: "auto" or a size in MiB, fractions by
// 64 KiB. Header-only, so the library itself does not depend on CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "seedd/weights.h"

namespace seedd {

// Checks a --chunk-mib value: "auto", or 0.0625 to 1024.
inline CLI::Validator ChunkMibValidator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value == "auto") return "";
        try {
          size_t used = 0;
          const double mib = std::stod(value, &used);
          if (used == value.size() && mib >= 0.0625 && mib <= 1024) return "";
        } catch (const std::exception&) {
        }
        return "Value " + value + " is neither auto nor a size from 0.0625 to 1024 MiB";
      },
      "auto|MIB");
}

// The chunk size in bytes of a checked --chunk-mib value; 0 for "auto".
inline uint64_t ChunkBytesOfFlag(const std::string& value) {
  return value == "auto" ? 0 : ChunkBytesOfMib(std::stod(value));
}

}  // namespace seedd
