// Fuzzes the target side of the catalog kind (seedctl ls): any JSON a daemon
// sends is checked; one that passes survives a round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "seedd/catalog.h"
#include "seedd/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto value = seedd::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!value.ok()) return 0;
  auto catalog = seedd::ParseCatalog(*value);
  if (!catalog.ok()) return 0;
  auto again = seedd::ParseCatalog(seedd::CatalogToJson(*catalog));
  if (!again.ok() || again->models.size() != catalog->models.size() ||
      again->artifacts != catalog->artifacts || again->truncated != catalog->truncated) {
    std::abort();
  }
  return 0;
}
