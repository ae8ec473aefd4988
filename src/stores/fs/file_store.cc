// file:///path: a shared directory (NFS and the like) with the disk store's rules.
#include <filesystem>

#include "stores/backends.h"
#include "stores/store_url.h"

namespace seedd {

Result<ArtifactStorePtr> OpenFileStore(std::string_view url) {
  Result<StoreUrl> u = StoreUrl::Parse(url);
  if (!u.ok()) return u.status();
  if (!u->host.empty() && u->host != "localhost") {
    return Status::InvalidArgument("file:// URLs name a local path (file:///path)");
  }
  if (u->path.empty() || u->path == "/") {
    return Status::InvalidArgument("file:// needs a directory path");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(u->path, ec)) {
    return Status::NotFound(u->path + " is not a directory (mount the share first)");
  }
  DiskStoreOptions options;
  options.max_value_bytes = 1ull << 30;
  return NewDiskArtifactStore("", u->path, options);
}

}  // namespace seedd
