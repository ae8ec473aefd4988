#include "notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "seedd/units.h"

namespace seedd_app {

SystemdNotifier::SystemdNotifier() {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (where == nullptr || where[0] == '\0') return;
  std::string path = where;
  ::unsetenv("NOTIFY_SOCKET");
  if (path[0] == '@') path[0] = '\0';
  if (path.size() >= sizeof(sockaddr_un::sun_path) || (path[0] != '/' && path[0] != '\0')) return;
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  address_ = path;
}

SystemdNotifier::~SystemdNotifier() {
  if (fd_ >= 0) ::close(fd_);
}

bool SystemdNotifier::Send(const std::string& message) const {
  if (fd_ < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size() +
                                               (address_[0] == '\0' ? 0 : 1));
  return ::sendto(fd_, message.data(), message.size(), MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&addr),
                  len) == static_cast<ssize_t>(message.size());
}

std::string StatusLineOf(const seedd::Json& status) {
  if (!status.is_object()) return "";
  std::string line;
  for (const seedd::Json& p : status.value("pulls", seedd::Json::array())) {
    if (!p.is_object() || p.value("state", "") != "pulling") continue;
    const uint64_t total = p.value("bytes_total", uint64_t{0});
    const uint64_t verified = p.value("bytes_verified", uint64_t{0});
    const double pct =
        total == 0 ? 0 : 100.0 * static_cast<double>(verified) / static_cast<double>(total);
    char text[256];
    std::snprintf(text, sizeof(text), "pulling %s: %.0f%% of %s at %s",
                  p.value("model", "?").c_str(), pct, seedd::HumanBytes(total).c_str(),
                  seedd::HumanRate(p.value("rate_bytes_per_second", 0.0)).c_str());
    line += (line.empty() ? "" : "; ") + std::string(text);
  }
  if (!line.empty()) return line;
  for (const seedd::Json& w : status.value("warmups", seedd::Json::array())) {
    if (w.is_object() && w.value("state", "") == "running") {
      line += (line.empty() ? "warming up: " : ", ") + w.value("kind", "?");
    }
  }
  return line;
}

}  // namespace seedd_app
