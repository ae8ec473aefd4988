#include "seedd/units.h"

#include <cmath>
#include <cstdio>

namespace seedd {

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (v >= 1023.995 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1024;
    ++unit;
  }
  char text[32];
  const char* format = v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s";
  std::snprintf(text, sizeof(text), format, v, kUnits[unit]);
  return text;
}

std::string HumanRate(double bytes_per_second) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0) bytes_per_second = 0;
  return HumanBytes(static_cast<uint64_t>(bytes_per_second)) + "/s";
}

std::string HumanSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "unknown";
  char text[48];
  if (seconds < 10) {
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  } else if (seconds < 60) {
    std::snprintf(text, sizeof(text), "%.0f s", seconds);
  } else if (seconds < 3600) {
    const auto s = static_cast<long>(std::lround(seconds));
    std::snprintf(text, sizeof(text), "%ld min %ld s", s / 60, s % 60);
  } else {
    const auto m = static_cast<long>(std::lround(seconds / 60));
    std::snprintf(text, sizeof(text), "%ld h %ld min", m / 60, m % 60);
  }
  return text;
}

}  // namespace seedd
