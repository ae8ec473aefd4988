// The JSON value type of the seed protocol's payloads and keys.
#pragma once

#include <nlohmann/json.hpp>

namespace seedd {

using Json = nlohmann::json;

}  // namespace seedd
