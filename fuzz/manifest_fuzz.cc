// Fuzzes the target side of weight_shards: any JSON a source sends as a
// manifest is validated; one that passes survives a round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kinds/weights/files/manifest.h"
#include "seedd/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto value = seedd::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!value.ok()) return 0;
  auto manifest = seedd::ParseManifest(*value);
  if (!manifest.ok()) return 0;
  auto again = seedd::ParseManifest(manifest->ToJson());
  if (!again.ok() || again->root_digest != manifest->root_digest) std::abort();
  return 0;
}
