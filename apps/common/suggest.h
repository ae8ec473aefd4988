// "Did you mean": the known name closest to a misspelt one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace seedd {

// The name in `known` at the smallest edit distance from `word` when that
// distance is small (at most 2, and less than a third of the word), else "".
std::string ClosestName(std::string_view word, const std::vector<std::string>& known);

}  // namespace seedd
