#include "kinds/weights/files/reuse.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "common/unique_fd.h"
#include "kinds/weights/files/file_digests.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

// One basis file, opened when a chunk of its path is first looked for.
struct BasisFile {
  std::string path;           // manifest path; empty: none open
  std::vector<UniqueFd> fds;  // one per basis, -1 where it has no such regular file
  std::vector<uint64_t> sizes;
};

void OpenBasisFile(const std::vector<std::filesystem::path>& bases, const std::string& path,
                   BasisFile* f) {
  f->path = path;
  f->fds.clear();
  f->sizes.assign(bases.size(), 0);
  for (size_t b = 0; b < bases.size(); ++b) {
    const std::filesystem::path abs = bases[b] / path;
    UniqueFd fd(::open(abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    struct stat st {};
    if (fd.get() >= 0 && (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))) fd.Reset(-1);
    if (fd.get() >= 0) f->sizes[b] = static_cast<uint64_t>(st.st_size);
    f->fds.push_back(std::move(fd));
  }
}

// Reads [offset, offset + n) of `fd` into `buf`; false when short or failing.
bool ReadAt(int fd, uint64_t offset, char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

Result<std::vector<uint32_t>> ReuseLocalChunks(const Manifest& manifest, Staging& staging,
                                               const std::vector<uint32_t>& have,
                                               const std::vector<std::filesystem::path>& bases,
                                               ReuseStats* stats) {
  std::vector<uint32_t> reused;
  if (bases.empty()) return reused;
  std::vector<bool> done(manifest.chunks.size(), false);
  for (uint32_t i : have) {
    if (i < done.size()) done[i] = true;
  }
  uint64_t largest = 0;
  for (const ManifestChunk& c : manifest.chunks) largest = std::max(largest, c.length);
  std::string buf(largest, '\0');
  BasisFile file;
  for (uint32_t i = 0; i < manifest.chunks.size(); ++i) {
    if (done[i]) continue;
    const ManifestChunk& c = manifest.chunks[i];
    if (c.length == 0) continue;
    if (file.path != c.file) OpenBasisFile(bases, c.file, &file);
    for (size_t b = 0; b < bases.size(); ++b) {
      if (file.fds[b].get() < 0 || file.sizes[b] < c.offset + c.length) continue;
      if (!ReadAt(file.fds[b].get(), c.offset, buf.data(), c.length)) continue;
      const std::string_view bytes(buf.data(), c.length);
      if (ChunkDigestHex(manifest.chunk_digest, bytes) != c.digest) continue;
      Result<std::shared_ptr<UniqueFd>> out = staging.FileFor(c);
      if (!out.ok()) return out.status();
      SEEDD_RETURN_IF_ERROR(staging.Write(**out, c, 0, bytes.data(), bytes.size()));
      SEEDD_RETURN_IF_ERROR(staging.Commit(i));
      reused.push_back(i);
      ++stats->chunks;
      stats->bytes += c.length;
      break;
    }
  }
  return reused;
}

}  // namespace seedd
