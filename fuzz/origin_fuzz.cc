// Fuzzes what an upstream origin sends or an operator writes, before any of it
// is used: OCI references (oci://...), registries' WWW-Authenticate challenges,
// artifact manifests (each named path must be safe below a directory), and
// registry credential files. The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kinds/weights/files/manifest.h"
#include "origins/oci.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto ref = seedd::ParseOciReference(text);
      // What a reference prints is a reference that reads back the same.
      if (ref.ok()) {
        auto again = seedd::ParseOciReference(ref->ToString());
        if (!again.ok() || again->ToString() != ref->ToString()) __builtin_trap();
      }
      break;
    }
    case 1:
      (void)seedd::ParseAuthChallenge(text);
      break;
    case 2: {
      seedd::Json manifest = seedd::Json::parse(text, nullptr, false);
      if (manifest.is_discarded()) break;
      auto files = seedd::OciManifestFiles(manifest);
      if (files.ok()) {
        for (const auto& f : *files) {
          if (!seedd::ValidateRelativePath(f.path).ok() || seedd::IsReservedPath(f.path)) {
            __builtin_trap();  // an unsafe path got through
          }
        }
      }
      break;
    }
    default:
      (void)seedd::RegistryAuthFromJson(text, "registry.example.com:5000");
      break;
  }
  return 0;
}
