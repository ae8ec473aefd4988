// AddressLimits: what one peer host may hold of a listener. Counts, per
// address, the connections that have not authenticated yet, the data-plane
// streams, and failed authentications in a sliding window; and the
// unauthenticated connections in all, so that a flood leaves room for
// authenticated work. IPv6 peers are grouped by /64 (one host's usual share).
//
// Sans-I/O: the listener reports events and passes the time in.
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "common/mutex.h"

namespace seedd {

struct AddressLimitOptions {
  size_t max_unauthenticated_per_address = 64;
  size_t max_unauthenticated = 768;  // over every address: the rest of the cap stays for work
  size_t max_streams_per_address = 32;
  // More failed authentications than this from one address within the window and
  // its new connections are refused until the window ends.
  size_t max_auth_failures = 20;
  std::chrono::milliseconds auth_failure_window{10000};
  size_t max_addresses = 65536;  // addresses tracked at once
};

class AddressLimits {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Verdict {
    kAccept,
    kAddressFull,  // this address holds max_unauthenticated_per_address
    kServerFull,   // max_unauthenticated in all
    kEvict,        // max_unauthenticated in all, but `*victim` holds far more: take one of its
    kThrottled,    // too many failed authentications from this address
    kTooManyAddresses,
  };

  explicit AddressLimits(AddressLimitOptions options) : options_(options) {}

  // The key of a peer address: the address itself, or its /64 for IPv6.
  static std::string Key(const std::string& address);

  // A new connection from `key`; kAccept counts it as unauthenticated. When the
  // total is at its cap, a host holding fewer than the heaviest one less one is
  // not refused: kEvict names the heaviest in *victim, and the caller closes one
  // of its unauthenticated connections and calls Transfer (fair shares under a
  // flood from many hosts).
  Verdict Admit(const std::string& key, Clock::time_point now, std::string* victim = nullptr);
  // One unauthenticated connection moves from `from` (closed) to `to` (admitted).
  void Transfer(const std::string& from, const std::string& to);
  // An admitted connection authenticated, or closed before it did.
  void Authenticated(const std::string& key);
  void Released(const std::string& key);
  // Returns the failures from `key` within the window, this one included.
  size_t AuthFailed(const std::string& key, Clock::time_point now);
  // A data-plane stream from `key`: false when it holds max_streams_per_address.
  bool AdmitStream(const std::string& key);
  void StreamEnded(const std::string& key);

  const AddressLimitOptions& options() const { return options_; }
  size_t unauthenticated() const;

 private:
  struct Entry {
    size_t unauthenticated = 0;
    size_t streams = 0;
    size_t failures = 0;
    Clock::time_point window_start{};
  };
  // Drops `it` when it holds nothing and remembers no recent failure.
  void Tidy(std::map<std::string, Entry>::iterator it, Clock::time_point now) REQUIRES(mu_);

  const AddressLimitOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Entry> entries_ GUARDED_BY(mu_);
  size_t unauthenticated_ GUARDED_BY(mu_) = 0;
};

}  // namespace seedd
