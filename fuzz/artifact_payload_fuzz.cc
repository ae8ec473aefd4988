// Fuzzes the target side: a response from a source (any JSON) is validated as an
// artifact payload and, when valid, installed into an in-memory store.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "seedd/artifact_kind.h"
#include "seedd/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto value = seedd::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!value.ok()) return 0;
  static seedd::SeedablePtr seedable = seedd::NewArtifactSeedable(seedd::NewMemoryArtifactStore());
  auto payload = value->is_object() && value->contains("payload") ? (*value)["payload"] : *value;
  auto valid = seedable->ValidatePayload(payload);
  if (valid.ok()) {
    seedd::Json ctx = {{"namespace", "triton"},
                       {"config_hash", "0123456789abcdef"},
                       {"filename", payload.value("filename", std::string("x"))}};
    (void)seedable->Install(ctx, *valid);
  }
  return 0;
}
