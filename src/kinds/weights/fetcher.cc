#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "kinds/weights/data_plane.h"
#include "transport/client.h"
#include "wire/frame.h"
#include "wire/json_text.h"

namespace seedd {
namespace {

constexpr int kMaxSourceFailures = 3;
constexpr const char* kJournal = ".seedd-journal";
constexpr const char* kRootMarker = ".seedd-root";

uint32_t GetU32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

Status RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("recv", errno);
    if (r == 0) return Status::Unavailable("the source closed the data connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Result<std::string> FileSha256(int fd, uint64_t size) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buf(8 << 20, '\0');
  for (uint64_t off = 0; off < size;) {
    ssize_t r = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - off),
                        static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      EVP_MD_CTX_free(ctx);
      return ErrnoStatus("read back", r < 0 ? errno : EIO);
    }
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(r));
    off += static_cast<uint64_t>(r);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

// Shared state of one fetch: the chunks left, the journal, the files.
class Fetch {
 public:
  Fetch(const Manifest& m, std::filesystem::path staging, const FetchOptions& o, FetchStats* s)
      : m_(m), staging_(std::move(staging)), options_(o), stats_(s) {}

  Status Prepare() {
    std::error_code ec;
    // A staging directory of another model version starts over.
    std::ifstream marker(staging_ / kRootMarker);
    std::string root((std::istreambuf_iterator<char>(marker)), {});
    if (root != m_.root_digest) std::filesystem::remove_all(staging_, ec);
    std::filesystem::create_directories(staging_, ec);
    if (ec) return Status::IoError("create " + staging_.string() + ": " + ec.message());
    std::ofstream(staging_ / kRootMarker) << m_.root_digest;
    // Chunks a previous run verified.
    std::ifstream journal(staging_ / kJournal, std::ios::binary);
    unsigned char rec[4];
    while (journal.read(reinterpret_cast<char*>(rec), 4)) {
      uint32_t i = GetU32(rec);
      if (i < m_.chunks.size() && done_.insert(i).second) {
        verified_bytes_ += m_.chunks[i].length;
        ++stats_->chunks_resumed;
      }
    }
    // Enough space for what is still missing, before any byte moves.
    struct statvfs fs {};
    if (::statvfs(staging_.c_str(), &fs) == 0) {
      const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
      const uint64_t needed = m_.total_size - verified_bytes_;
      if (free_bytes < needed) {
        return Status::ResourceExhausted("not enough space in " + staging_.parent_path().string() +
                                         ": " + std::to_string(needed) + " bytes needed, " +
                                         std::to_string(free_bytes) + " available");
      }
    }
    for (const ManifestFile& f : m_.files) {
      const auto path = staging_ / f.path;
      std::filesystem::create_directories(path.parent_path(), ec);
      UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
      if (!fd.valid()) return ErrnoStatus("create " + path.string(), errno);
      if (::ftruncate(fd.get(), static_cast<off_t>(f.size)) != 0) {
        return ErrnoStatus("size " + path.string(), errno);
      }

      files_[f.path] = std::move(fd);
    }
    journal_.Reset(
        ::open((staging_ / kJournal).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!journal_.valid()) return ErrnoStatus("open the journal", errno);
    // Interleave the files: concurrent connections then write to different files
    // instead of contending for one file's lock in the kernel.
    std::map<std::string, std::deque<uint32_t>> by_file;
    for (uint32_t i = 0; i < m_.chunks.size(); ++i) {
      if (done_.count(i) == 0) by_file[m_.chunks[i].file].push_back(i);
    }
    for (bool any = true; any;) {
      any = false;
      for (auto& [file, chunks] : by_file) {
        if (chunks.empty()) continue;
        queue_.push_back(chunks.front());
        chunks.pop_front();
        any = true;
      }
    }
    return Status::Ok();
  }

  // One connection's loop against `source`; returns when nothing is left for it.
  void Work(const HostPort& source) {
    while (!SourceDropped(source)) {
      Result<UniqueFd> conn = Open(source);
      if (!conn.ok()) {
        Logger().warn("weight_data: {}: {}", source.ToString(), conn.status().message());
        if (Fail(source)) return;
        continue;
      }
      std::deque<uint32_t> inflight;
      Status st = Pump(conn->get(), source, &inflight);
      Requeue(&inflight);
      if (st.ok()) return;  // nothing left
      Logger().warn("weight_data: {}: {}", source.ToString(), st.message());
      if (Fail(source)) return;
    }
  }

  bool Complete() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_.size() == m_.chunks.size();
  }

  Status Finish() {
    for (auto& [path, fd] : files_) {
      if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path, errno);
    }
    if (options_.verify_sha256) {
      for (const ManifestFile& f : m_.files) {
        Result<std::string> digest = FileSha256(files_.at(f.path).get(), f.size);
        if (!digest.ok()) return digest.status().WithContext(f.path);
        if (*digest != f.sha256) {
          // Every chunk passed XXH3 yet the file does not match: start over.
          std::error_code ec;
          files_.clear();
          std::filesystem::remove_all(staging_, ec);
          return Status::DataLoss(f.path + " failed SHA-256 verification");
        }
      }
    }
    files_.clear();
    journal_.Reset();
    std::error_code ec;
    std::filesystem::remove(staging_ / kJournal, ec);
    std::filesystem::remove(staging_ / kRootMarker, ec);
    return Status::Ok();
  }

 private:
  Result<UniqueFd> Open(const HostPort& source) {
    Result<UniqueFd> fd = ConnectTcp(source, std::chrono::seconds(5));
    if (!fd.ok()) return fd.status();
    int flags = ::fcntl(fd->get(), F_GETFL);
    ::fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK);
    timeval tv{static_cast<time_t>(options_.timeout.count() / 1000),
               static_cast<suseconds_t>((options_.timeout.count() % 1000) * 1000)};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    Json request = {
        {"kind", kWeightDataKind}, {"root_digest", m_.root_digest}, {"token", options_.token}};
    std::string frame = EncodeJsonFrame(request);
    if (::send(fd->get(), frame.data(), frame.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(frame.size())) {
      return Status::Unavailable("cannot send the data request");
    }
    Result<std::string> body = ReadFrameBody(fd->get(), 64 * 1024, Clock::now() + options_.timeout);
    if (!body.ok()) return body.status();
    Result<Json> response = ParseJson(*body);
    if (!response.ok() || !response->is_object() || (*response)["status"] != "ok") {
      return Status::PermissionDenied("the source refused the data connection: " + *body);
    }
    return fd;
  }

  // Keeps up to `pipeline` requests in flight; verifies and writes each chunk.
  Status Pump(int fd, const HostPort& source, std::deque<uint32_t>* inflight) {
    std::string buf;  // one chunk; never a whole file
    for (;;) {
      while (static_cast<int>(inflight->size()) < options_.pipeline) {
        std::optional<uint32_t> next = Take(inflight->empty(), source);
        if (!next) break;
        char req[8] = {'S', 'D', 'R', 'Q'};
        for (int i = 0; i < 4; ++i) req[4 + i] = static_cast<char>((*next >> (24 - 8 * i)) & 0xff);
        if (::send(fd, req, sizeof(req), MSG_NOSIGNAL) != sizeof(req)) {
          Requeue(next);
          return Status::Unavailable("cannot send a chunk request");
        }
        inflight->push_back(*next);
      }
      if (inflight->empty()) return Status::Ok();
      unsigned char header[24];
      SEEDD_RETURN_IF_ERROR(RecvAll(fd, reinterpret_cast<char*>(header), sizeof(header)));
      const uint32_t index = GetU32(header + 4);
      if (std::memcmp(header, "SDCH", 4) != 0 || index != inflight->front() ||
          GetU32(header + 8) != 0) {
        return Status::DataLoss("malformed chunk response");
      }
      inflight->pop_front();
      const ManifestChunk& c = m_.chunks[index];
      if (GetU64(header + 16) != c.length) {
        Requeue(index);
        return Status::DataLoss("chunk " + std::to_string(index) + " has the wrong length");
      }
      bool verified = false;
      Status got = Receive(fd, index, &buf, &verified);
      if (!got.ok()) {
        Requeue(index);
        return got;
      }
      Count(c.length);
      if (!verified) {
        Logger().warn(
            "weight_data: chunk {} ({} at {}) from {} failed verification; fetching it again",
            index, c.file, c.offset, source.ToString());
        Reject(index, source);
        if (SourceDropped(source)) return Status::DataLoss("source dropped after bad chunks");
        continue;
      }
      Status stored = Write(index, buf);
      if (stored.ok()) stored = Record(index);
      if (!stored.ok()) {
        Requeue(index);
        return stored;
      }
    }
  }

  // Receives chunk `index` into `buf` and checks its digest.
  Status Receive(int sock, uint32_t index, std::string* buf, bool* verified) {
    const ManifestChunk& c = m_.chunks[index];
    buf->resize(c.length);
    Status st = RecvAll(sock, buf->data(), c.length);
    *verified = st.ok() && Xxh3Hex(*buf) == c.xxh3;
    return st;
  }

  // Writes a verified chunk into its staging file and syncs it; the caller then
  // journals it, so a crash never records an unwritten chunk.
  Status Write(uint32_t index, const std::string& data) {
    const ManifestChunk& c = m_.chunks[index];
    int fd = files_.at(c.file).get();
    size_t off = 0;
    while (off < data.size()) {
      ssize_t w =
          ::pwrite(fd, data.data() + off, data.size() - off, static_cast<off_t>(c.offset + off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoStatus("write " + c.file, errno);
      off += static_cast<size_t>(w);
    }
    if (::fdatasync(fd) != 0) return ErrnoStatus("sync " + c.file, errno);
    return Status::Ok();
  }

  Status Record(uint32_t index) {
    const ManifestChunk& c = m_.chunks[index];
    std::lock_guard<std::mutex> lock(mu_);
    unsigned char rec[4] = {
        static_cast<unsigned char>(index >> 24), static_cast<unsigned char>(index >> 16),
        static_cast<unsigned char>(index >> 8), static_cast<unsigned char>(index)};
    if (::write(journal_.get(), rec, 4) != 4) {
      return ErrnoStatus("journal chunk " + std::to_string(index), errno);
    }
    done_.insert(index);
    --taken_;
    changed_.notify_all();
    verified_bytes_ += c.length;
    if (options_.progress) options_.progress(verified_bytes_);
    return Status::Ok();
  }

  // The next chunk to fetch. With `wait` (the caller has nothing in flight), an
  // empty queue is waited on while other connections still hold chunks: one of
  // them may fail and hand its chunks back.
  std::optional<uint32_t> Take(bool wait, const HostPort& source) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) {
      changed_.wait(lock, [&] {
        return !queue_.empty() || taken_ == 0 || dropped_.count(source.ToString()) != 0;
      });
    }
    if (queue_.empty() || dropped_.count(source.ToString()) != 0) return std::nullopt;
    uint32_t i = queue_.front();
    queue_.pop_front();
    ++taken_;
    return i;
  }
  void Requeue(std::optional<uint32_t> i) {
    if (!i) return;
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(*i);
    --taken_;
    changed_.notify_all();
  }
  void Requeue(std::deque<uint32_t>* inflight) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i : *inflight) queue_.push_back(i);
    taken_ -= inflight->size();
    inflight->clear();
    changed_.notify_all();
  }
  void Count(uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_->bytes_received += n;
  }
  void Reject(uint32_t index, const HostPort& source) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_->chunks_rejected;
    queue_.push_back(index);
    --taken_;
    FailLocked(source);
    changed_.notify_all();
  }
  bool Fail(const HostPort& source) {
    std::lock_guard<std::mutex> lock(mu_);
    changed_.notify_all();
    return FailLocked(source);
  }
  // True when the source is now dropped.
  bool FailLocked(const HostPort& source) {
    const std::string s = source.ToString();
    if (++failures_[s] >= kMaxSourceFailures && dropped_.insert(s).second) {
      Logger().warn("weight_data: dropping source {} after {} failures", s, kMaxSourceFailures);
      stats_->sources_dropped.push_back(s);
    }
    return dropped_.count(s) != 0;
  }
  bool SourceDropped(const HostPort& source) {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_.count(source.ToString()) != 0;
  }

  const Manifest& m_;
  const std::filesystem::path staging_;
  const FetchOptions& options_;
  FetchStats* stats_;
  std::mutex mu_;
  std::condition_variable changed_;      // queue_, taken_ or dropped_ changed
  std::deque<uint32_t> queue_;           // GUARDED_BY(mu_)
  size_t taken_ = 0;                     // GUARDED_BY(mu_): chunks in flight on any connection
  std::set<uint32_t> done_;              // GUARDED_BY(mu_)
  uint64_t verified_bytes_ = 0;          // GUARDED_BY(mu_)
  std::map<std::string, int> failures_;  // GUARDED_BY(mu_)
  std::set<std::string> dropped_;        // GUARDED_BY(mu_)
  std::map<std::string, UniqueFd> files_;
  UniqueFd journal_;
};

}  // namespace

Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into, const FetchOptions& options,
                  FetchStats* stats) {
  FetchStats local;
  if (stats == nullptr) stats = &local;
  std::error_code ec;
  if (std::filesystem::exists(into, ec)) {
    return Status::AlreadyExists(into.string() + " exists; pull into a new directory");
  }
  if (sources.empty()) return Status::InvalidArgument("no source to fetch from");
  const auto parent = into.has_parent_path() ? into.parent_path() : std::filesystem::path(".");
  const auto staging = parent / ("." + into.filename().string() + ".seedd-staging");
  Fetch fetch(manifest, staging, options, stats);
  SEEDD_RETURN_IF_ERROR(fetch.Prepare());
  std::vector<std::thread> workers;
  for (const HostPort& s : sources) {
    for (int c = 0; c < std::max(1, options.connections_per_source); ++c) {
      workers.emplace_back([&fetch, s] { fetch.Work(s); });
    }
  }
  for (auto& w : workers) w.join();
  if (!fetch.Complete()) {
    return Status::Unavailable(
        "every source failed before the model was complete; rerun to resume");
  }
  SEEDD_RETURN_IF_ERROR(fetch.Finish());
  // Nothing partial is ever visible under the final name.
  std::filesystem::rename(staging, into, ec);
  if (ec)
    return Status::IoError("rename " + staging.string() + " to " + into.string() + ": " +
                           ec.message());
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) ::fsync(dir.get());
  return Status::Ok();
}

}  // namespace seedd
