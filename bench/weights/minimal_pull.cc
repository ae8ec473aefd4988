// The least any verifying puller can do here, a baseline of bench/weights.sh:
// a forked sender sends the given files over 4 loopback TCP connections with
// sendfile (connection k sends files k, k+4, ...); the receiver's 4 threads
// receive them in 256 KiB pieces (MSG_WAITALL) and, in mode `write`, hash each
// piece with XXH3-128 and pwrite it into DEST/<file name>, then sync each file,
// as a pull does; in mode `network` they drop what arrives. No protocol, no
// journal, no deadlines. Mode `land` is the bound of landing the bytes at all:
// no network and no hash, 4 threads pwrite the files' sizes from one 256 KiB
// buffer each into DEST and sync them; no puller lands bytes faster than this.
// Mode `hash` is the cost of a chunk digest alone: one thread hashes a 256 KiB
// buffer in cache, as many times as the files hold bytes, with XXH3-128 or
// SHA-256 (OpenSSL, SHA extensions where the CPU has them).
//
//   minimal_pull network FILE...
//   minimal_pull write DEST FILE...
//   minimal_pull land DEST FILE...
//   minimal_pull hash xxh3|sha256 FILE...
// Prints "minimal_pull: MODE B bytes in S s: G Gbit/s, receiver CPU R s/GiB,
// sender CPU T s/GiB".
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kConnections = 4;
constexpr size_t kPiece = 256 * 1024;

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

double CpuSeconds(int who) {
  rusage ru{};
  ::getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

void Send(int conn, const std::vector<std::string>& files, int k) {
  for (size_t i = static_cast<size_t>(k); i < files.size(); i += kConnections) {
    int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) Die("minimal_pull: open");
    off_t at = 0;
    while (at < st.st_size) {
      ssize_t n = ::sendfile(conn, fd, &at, static_cast<size_t>(st.st_size - at));
      if (n <= 0) Die("minimal_pull: sendfile");
    }
    ::close(fd);
  }
}

int Create(const char* dest, const std::string& file, uint64_t size) {
  const std::string name = file.substr(file.rfind('/') + 1);
  int out = ::open((std::string(dest) + "/" + name).c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                   0644);
  if (out < 0 || ::ftruncate(out, static_cast<off_t>(size)) != 0) Die("minimal_pull: create");
  return out;
}

void Receive(int conn, const std::vector<std::string>& files, const std::vector<uint64_t>& sizes,
             int k, const char* dest) {
  std::vector<char> buf(kPiece);
  XXH3_state_t* state = XXH3_createState();
  for (size_t i = static_cast<size_t>(k); i < files.size(); i += kConnections) {
    int out = -1;
    if (dest != nullptr) {
      out = Create(dest, files[i], sizes[i]);
      XXH3_128bits_reset(state);
    }
    for (uint64_t at = 0; at < sizes[i];) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kPiece, sizes[i] - at));
      ssize_t n = ::recv(conn, buf.data(), want, MSG_WAITALL);
      if (n <= 0) Die("minimal_pull: recv");
      if (out >= 0) {
        XXH3_128bits_update(state, buf.data(), static_cast<size_t>(n));
        if (::pwrite(out, buf.data(), static_cast<size_t>(n), static_cast<off_t>(at)) != n) {
          Die("minimal_pull: pwrite");
        }
      }
      at += static_cast<uint64_t>(n);
    }
    if (out >= 0) {
      volatile uint64_t digest = XXH3_128bits_digest(state).low64;
      (void)digest;
      if (::fdatasync(out) != 0) Die("minimal_pull: fdatasync");
      ::close(out);
    }
  }
  XXH3_freeState(state);
}

// Mode `land`: files k, k + 4, ... written from one buffer and synced.
void Land(const std::vector<std::string>& files, const std::vector<uint64_t>& sizes, int k,
          const char* dest) {
  std::vector<char> buf(kPiece, static_cast<char>(0x5a + k));
  for (size_t i = static_cast<size_t>(k); i < files.size(); i += kConnections) {
    const int out = Create(dest, files[i], sizes[i]);
    for (uint64_t at = 0; at < sizes[i];) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, sizes[i] - at));
      if (::pwrite(out, buf.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
        Die("minimal_pull: pwrite");
      }
      at += n;
    }
    if (::fdatasync(out) != 0) Die("minimal_pull: fdatasync");
    ::close(out);
  }
}

// Mode `hash`: `total` bytes of one 256 KiB piece in cache through the digest,
// one digest per 2 MiB (a chunk). Returns CPU seconds.
double Hash(const std::string& algo, uint64_t total) {
  std::vector<char> buf(kPiece, 0x5a);
  constexpr uint64_t kChunk = 2u << 20;
  XXH3_state_t* state = XXH3_createState();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const EVP_MD* sha = EVP_sha256();
  const double cpu0 = CpuSeconds(RUSAGE_SELF);
  for (uint64_t at = 0; at < total;) {
    if (algo == "sha256") {
      EVP_DigestInit_ex(ctx, sha, nullptr);
    } else {
      XXH3_128bits_reset(state);
    }
    for (uint64_t in = 0; in < kChunk && at < total; in += kPiece, at += kPiece) {
      if (algo == "sha256") {
        EVP_DigestUpdate(ctx, buf.data(), buf.size());
      } else {
        XXH3_128bits_update(state, buf.data(), buf.size());
      }
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (algo == "sha256") {
      EVP_DigestFinal_ex(ctx, md, &n);
    } else {
      volatile uint64_t digest = XXH3_128bits_digest(state).low64;
      (void)digest;
    }
  }
  EVP_MD_CTX_free(ctx);
  XXH3_freeState(state);
  return CpuSeconds(RUSAGE_SELF) - cpu0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hash" && argc >= 4 &&
      (std::string(argv[2]) == "xxh3" || std::string(argv[2]) == "sha256")) {
    uint64_t total = 0;
    for (int i = 3; i < argc; ++i) {
      struct stat st {};
      if (::stat(argv[i], &st) != 0) Die("minimal_pull: stat");
      total += static_cast<uint64_t>(st.st_size);
    }
    const double cpu = Hash(argv[2], total);
    const double gib = static_cast<double>(total) / (1u << 30);
    std::printf("minimal_pull: hash %s %llu bytes: %.2f Gbit/s, receiver CPU %.3f s/GiB\n", argv[2],
                static_cast<unsigned long long>(total),
                static_cast<double>(total) * 8 / std::max(cpu, 1e-9) / 1e9, cpu / gib);
    return 0;
  }
  const bool write = mode == "write" || mode == "land";
  if ((mode != "network" && !write) || argc < (write ? 4 : 3)) {
    std::fprintf(stderr,
                 "usage: minimal_pull network FILE...\n       minimal_pull write DEST FILE...\n"
                 "       minimal_pull land DEST FILE...\n"
                 "       minimal_pull hash xxh3|sha256 FILE...\n");
    return 2;
  }
  const char* dest = write ? argv[2] : nullptr;
  std::vector<std::string> files(argv + (write ? 3 : 2), argv + argc);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) Die("minimal_pull: stat");
    sizes.push_back(static_cast<uint64_t>(st.st_size));
    total += sizes.back();
  }
  const double gib = static_cast<double>(total) / (1u << 30);
  if (mode == "land") {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int k = 0; k < kConnections; ++k) threads.emplace_back(Land, files, sizes, k, dest);
    for (auto& t : threads) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("minimal_pull: land %llu bytes in %.3f s: %.2f Gbit/s, receiver CPU %.3f s/GiB\n",
                static_cast<unsigned long long>(total), seconds,
                static_cast<double>(total) * 8 / seconds / 1e9, CpuSeconds(RUSAGE_SELF) / gib);
    return 0;
  }
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(listener, kConnections) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Die("minimal_pull: listen");
  }
  const pid_t sender = ::fork();
  if (sender == 0) {
    std::vector<std::thread> threads;
    for (int k = 0; k < kConnections; ++k) {
      int conn = ::accept(listener, nullptr, nullptr);
      if (conn < 0) Die("minimal_pull: accept");
      threads.emplace_back([conn, &files, k] {
        Send(conn, files, k);
        ::close(conn);
      });
    }
    for (auto& t : threads) t.join();
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < kConnections; ++k) {
    int conn = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(conn, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      Die("minimal_pull: connect");
    }
    threads.emplace_back([conn, &files, &sizes, k, dest] {
      Receive(conn, files, sizes, k, dest);
      ::close(conn);
    });
  }
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double receiver_cpu = CpuSeconds(RUSAGE_SELF);
  int status = 0;
  ::waitpid(sender, &status, 0);
  const double sender_cpu = CpuSeconds(RUSAGE_CHILDREN);
  std::printf(
      "minimal_pull: %s %llu bytes in %.3f s: %.2f Gbit/s, receiver CPU %.3f s/GiB, sender CPU "
      "%.3f s/GiB\n",
      mode.c_str(), static_cast<unsigned long long>(total), seconds,
      static_cast<double>(total) * 8 / seconds / 1e9, receiver_cpu / gib, sender_cpu / gib);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
