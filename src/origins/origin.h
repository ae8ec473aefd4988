// Where models live upstream: an origin names a model's files, each with the
// digest its upstream gives it (the root of trust: a file is kept only when its
// bytes hash to it), and sends a file's bytes. OCI registries (oci.h) today;
// object stores next.
//
// Thread safety: an Origin's methods may be called from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/origins.h"
#include "seedd/status.h"

namespace seedd {

// One file of a model upstream.
struct OriginFile {
  std::string path;    // relative, validated (no "..", no absolute path)
  uint64_t size = 0;   // as the upstream says it
  std::string digest;  // "sha256:<64 hex>": of the file's bytes
};

// A model as its upstream describes it now.
struct OriginModel {
  std::string url;      // as given
  std::string version;  // what pins it: an OCI manifest's "sha256:<hex>"
  std::vector<OriginFile> files;
  uint64_t total_size = 0;
};

class Origin {
 public:
  virtual ~Origin() = default;
  Origin() = default;
  Origin(const Origin&) = delete;
  Origin& operator=(const Origin&) = delete;

  // The model's files now: NotFound for a model or tag the upstream does not
  // have, Unauthenticated or PermissionDenied when it refuses, Unavailable when
  // it cannot be reached; each error names the URL and what it answered.
  virtual Result<OriginModel> Resolve() = 0;
  // Sends `file`'s bytes to `sink` as they come (unverified: the caller hashes
  // them). An error from `sink` ends the transfer with it.
  virtual Status Fetch(const OriginFile& file,
                       const std::function<Status(std::string_view)>& sink) = 0;
};
using OriginPtr = std::unique_ptr<Origin>;

// The origin `url` names: InvalidArgument, saying what is wrong, for a URL that
// is not one; credentials are read here (an unreadable auth file is an error).
Result<OriginPtr> OpenOrigin(std::string_view url, const OriginAccess& access);

}  // namespace seedd
