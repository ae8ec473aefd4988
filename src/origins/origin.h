// Where models live upstream: an origin names a model's files, each with the
// digest its upstream gives it (the root of trust: a file is kept only when its
// bytes hash to it), and sends a file's bytes. OCI registries (oci.h) and S3
// and its compatibles (s3_origin.h).
//
// Thread safety: an Origin's methods may be called from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/origins.h"
#include "seedd/status.h"

namespace seedd {

// One file of a model upstream.
struct OriginFile {
  std::string path;   // relative, validated (no "..", no absolute path)
  uint64_t size = 0;  // as the upstream says it
  // Of the file's bytes: "sha256:<64 hex>" (an OCI layer), "md5:<32 hex>" (a
  // single-part S3 object's ETag), or empty when the upstream names none.
  std::string digest;
};

// A model as its upstream describes it now.
struct OriginModel {
  std::string url;  // as given
  // What pins it, "sha256:<hex>": an OCI manifest's digest; for S3, of the
  // listing (every key, size and ETag).
  std::string version;
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
  // The URL as Resolve's model names it (OriginModel::url), without asking the
  // upstream.
  virtual std::string Url() const = 0;
  // Sends `file`'s bytes to `sink` as they come (unverified: the caller hashes
  // them) and returns the digest they must have: the file's, or one the upstream
  // sent with them (S3's x-amz-checksum-sha256); empty when the upstream gives
  // none that applies (a multipart S3 object uploaded without a checksum). An
  // error from `sink` ends the transfer with it.
  virtual Result<std::string> Fetch(const OriginFile& file,
                                    const std::function<Status(std::string_view)>& sink) = 0;
  // Bytes [offset, offset + length) of `file` to `sink` (a ranged GET), and the
  // digest the whole file must have. FailedPrecondition when this origin cannot (the
  // default), when the upstream ignored the range (before `length` bytes went to
  // `sink`), or when the file's digest is not known without a whole GET: then
  // Fetch it.
  virtual Result<std::string> FetchRange(const OriginFile& file, uint64_t /*offset*/,
                                         uint64_t /*length*/,
                                         const std::function<Status(std::string_view)>& /*sink*/) {
    return Status::FailedPrecondition(file.path + ": no ranged GETs from this origin");
  }
  // A complete copy of `file` this origin keeps on this host (on the file
  // system of the model's cache), linked into place and checked instead of
  // fetched, with the digest it must have; nullopt (the default): Fetch it.
  struct LocalBytes {
    std::filesystem::path path;
    std::string expected;
  };
  virtual Result<std::optional<LocalBytes>> FetchLocal(const OriginFile& /*file*/) {
    return std::optional<LocalBytes>();
  }
};
using OriginPtr = std::unique_ptr<Origin>;

// The origin `url` names: InvalidArgument, saying what is wrong, for a URL that
// is not one; credentials are read here (an unreadable auth file is an error).
Result<OriginPtr> OpenOrigin(std::string_view url, const OriginAccess& access);

}  // namespace seedd
