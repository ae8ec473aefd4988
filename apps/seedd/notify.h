// The systemd notification protocol (sd_notify(3)), without libsystemd: one
// datagram per message to the AF_UNIX socket named by $NOTIFY_SOCKET (a path,
// or an abstract name starting with '@'). With Type=notify the unit is started
// once seedd sends READY=1, after its warmups and --pull are done, so an
// engine's After=seedd.service waits for its weights; STATUS= lines say what it
// is doing meanwhile (systemctl status shows the latest). Thread-safe.
#pragma once

#include <string>

#include "seedd/json.h"

namespace seedd_app {

class SystemdNotifier {
 public:
  // Reads $NOTIFY_SOCKET once (and unsets it, as sd_notify does when asked,
  // so that children do not notify in seedd's name). Inert without it.
  SystemdNotifier();
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  bool enabled() const { return fd_ >= 0; }
  // Sends "K=V\n..." as one datagram; false (and nothing else) on failure.
  bool Send(const std::string& message) const;

 private:
  int fd_ = -1;
  std::string address_;  // the sockaddr_un path bytes ('\0' first when abstract)
};

// "pulling llama: 45% of 16.1 GiB at 820 MiB/s" from a daemon's /status
// (Daemon::StatusJson); "" when nothing is under way.
std::string StatusLineOf(const seedd::Json& status);

}  // namespace seedd_app
