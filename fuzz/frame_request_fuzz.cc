// Fuzzes the source side of the control channel: bytes from a peer are decoded as
// a frame (64 KiB limit), parsed, authenticated and dispatched. Inputs that carry
// the test token reach the artifact kind's key validation and store lookup.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "seedd/artifact_kind.h"
#include "seedd/json_text.h"
#include "seedd/seed_transport.h"
#include "transport/handler.h"
#include "wire/frame.h"

namespace {

const seedd::RequestHandler& Handler() {
  static const seedd::RequestHandler* handler = [] {
    auto store = seedd::NewMemoryArtifactStore();
    (void)store->Put(*seedd::ArtifactKey::Make("triton", "0123456789abcdef", "kernels.bin"),
                     "compiled kernels");
    return new seedd::RequestHandler({seedd::NewArtifactSeedable(std::move(store))}, "tok");
  }();
  return *handler;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Feed in two pieces split by the first byte, as a socket might deliver them.
  size_t split = size == 0 ? 0 : data[0] % (size + 1);
  seedd::FrameReader reader(seedd::kMaxRemoteRequestBytes);
  size_t used = reader.Feed(bytes.substr(0, split));
  if (!reader.done() && !reader.failed()) used += reader.Feed(bytes.substr(split));
  if (used > size) __builtin_trap();
  if (reader.done()) {
    seedd::Json response = Handler().HandleFrameBody(reader.body());
    if (!response.is_object() || !response.contains("status")) __builtin_trap();
    (void)seedd::DumpJson(response);
  }
  // The body alone, as if framed correctly, so JSON-shaped inputs reach the handler too.
  if (size <= seedd::kMaxRemoteRequestBytes) {
    seedd::Json response = Handler().HandleFrameBody(bytes);
    if (!response.is_object()) __builtin_trap();
  }
  return 0;
}
