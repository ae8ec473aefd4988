// seedd --config FILE: a TOML file that sets flags. Each top-level key is a long
// flag's name without its dashes ("listen", "token-file"; '_' may stand for '-'),
// its value a string, integer, float or boolean, or an array of them for a flag
// that may be repeated ("source", "model", "pull", "store"). Flags given on the
// command line override the file (a repeated flag's whole list).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "seedd/status.h"

namespace seedd {

inline constexpr uintmax_t kMaxConfigBytes = 1 << 20;

struct ConfigEntry {
  std::string flag;               // "--listen"
  std::vector<std::string> args;  // the flag and its values, as on a command line
  std::string where;              // "FILE:LINE: key 'listen'", for errors
};

// Reads `file` against the flags of `app` (not its subcommands). An unreadable
// file, a TOML syntax error, an unknown key, a table, or a value of the wrong
// shape (an array for a flag given once, a boolean for a flag that takes a
// value) is InvalidArgument naming the file, the line and the key. A boolean
// flag set to false is left out. The keys "config", "help" and "version" are
// refused.
Result<std::vector<ConfigEntry>> ReadConfigFile(const std::filesystem::path& file,
                                                const CLI::App& app);

}  // namespace seedd
