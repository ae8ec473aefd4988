#include "transport/address_limits.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/mutex.h"

namespace seedd {

std::string AddressLimits::Key(const std::string& address) {
  in6_addr v6{};
  if (address.find(':') == std::string::npos || ::inet_pton(AF_INET6, address.c_str(), &v6) != 1) {
    return address;
  }
  if (IN6_IS_ADDR_V4MAPPED(&v6)) return address.substr(address.rfind(':') + 1);
  std::memset(v6.s6_addr + 8, 0, 8);  // one host's /64
  char text[INET6_ADDRSTRLEN];
  ::inet_ntop(AF_INET6, &v6, text, sizeof(text));
  return std::string(text) + "/64";
}

AddressLimits::Verdict AddressLimits::Admit(const std::string& key, Clock::time_point now,
                                            std::string* victim) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= options_.max_addresses) {
      // Forget addresses that hold nothing and whose failures are old.
      for (auto e = entries_.begin(); e != entries_.end();) Tidy(e++, now);
    }
    if (entries_.size() >= options_.max_addresses) return Verdict::kTooManyAddresses;
    it = entries_.emplace(key, Entry{}).first;
  }
  Entry& e = it->second;
  if (e.failures > options_.max_auth_failures &&
      now - e.window_start < options_.auth_failure_window) {
    return Verdict::kThrottled;
  }
  if (e.unauthenticated >= options_.max_unauthenticated_per_address) {
    return Verdict::kAddressFull;
  }
  if (unauthenticated_ >= options_.max_unauthenticated) {
    auto heaviest = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (heaviest == entries_.end() ||
          e->second.unauthenticated > heaviest->second.unauthenticated) {
        heaviest = e;
      }
    }
    if (victim != nullptr && heaviest != entries_.end() &&
        heaviest->second.unauthenticated > e.unauthenticated + 1) {
      *victim = heaviest->first;
      return Verdict::kEvict;
    }
    Tidy(it, now);
    return Verdict::kServerFull;
  }
  ++e.unauthenticated;
  ++unauthenticated_;
  return Verdict::kAccept;
}

void AddressLimits::Authenticated(const std::string& key) { Released(key); }

void AddressLimits::Transfer(const std::string& from, const std::string& to) {
  MutexLock lock(mu_);
  auto f = entries_.find(from);
  if (f != entries_.end() && f->second.unauthenticated > 0) {
    --f->second.unauthenticated;
    --unauthenticated_;
    Tidy(f, Clock::now());
  }
  ++entries_[to].unauthenticated;
  ++unauthenticated_;
}

void AddressLimits::Released(const std::string& key) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.unauthenticated == 0) return;
  --it->second.unauthenticated;
  --unauthenticated_;
  Tidy(it, Clock::now());
}

size_t AddressLimits::AuthFailed(const std::string& key, Clock::time_point now) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return 0;  // only admitted connections fail
  Entry& e = it->second;
  if (now - e.window_start >= options_.auth_failure_window) {
    e.window_start = now;
    e.failures = 0;
  }
  return ++e.failures;
}

bool AddressLimits::AdmitStream(const std::string& key) {
  MutexLock lock(mu_);
  Entry& e = entries_[key];
  if (e.streams >= options_.max_streams_per_address) return false;
  ++e.streams;
  return true;
}

void AddressLimits::StreamEnded(const std::string& key) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.streams == 0) return;
  --it->second.streams;
  Tidy(it, Clock::now());
}

size_t AddressLimits::unauthenticated() const {
  MutexLock lock(mu_);
  return unauthenticated_;
}

void AddressLimits::Tidy(std::map<std::string, Entry>::iterator it, Clock::time_point now) {
  const Entry& e = it->second;
  const bool remembers = e.failures > 0 && now - e.window_start < options_.auth_failure_window;
  if (e.unauthenticated == 0 && e.streams == 0 && !remembers) entries_.erase(it);
}

}  // namespace seedd
