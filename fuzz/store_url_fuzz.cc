// Fuzzes store URL handling: parsing, redaction and the registry's validation of
// URLs that never reach a network (unknown schemes, malformed parameters).
#include <cstddef>
#include <cstdint>
#include <string>

#include "seedd/store_registry.h"
#include "stores/store_url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto url = seedd::StoreUrl::Parse(text);
  std::string redacted = seedd::RedactStoreUrl(text);
  if (url.ok() && url->password.has_value() && !url->password->empty()) {
    auto shown = seedd::StoreUrl::Parse(redacted);
    if (!shown.ok() || shown->password != std::optional<std::string>("***")) {
      __builtin_trap();  // a password survived redaction
    }
  }
  // Only schemes that cannot touch the network or the filesystem.
  if (text.rfind("x", 0) == 0) (void)seedd::OpenArtifactStore(text);
  return 0;
}
