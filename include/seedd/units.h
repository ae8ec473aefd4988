// Sizes, rates and durations as people read them: "512 B", "3.2 MiB",
// "2.71 GiB", "96.4 MiB/s", "1 min 5 s". Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace seedd {

// Bytes in binary units with three significant digits: "0 B", "1023 B",
// "1.00 KiB", "3.21 MiB", "17.4 GiB", "1.20 TiB".
std::string HumanBytes(uint64_t bytes);

// Bytes per second, as HumanBytes with "/s".
std::string HumanRate(double bytes_per_second);

// Seconds, rounded: "0.4 s", "12 s", "3 min 5 s", "2 h 4 min"; "unknown" for a
// negative or non-finite value.
std::string HumanSeconds(double seconds);

}  // namespace seedd
