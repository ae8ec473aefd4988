// TLS 1.3 for both planes (OpenSSL 3): a daemon's server side (its certificate,
// and with client_auth the CA its peers' certificates must chain to: mTLS) and
// its client side (the CA its sources' certificates must chain to, the name they
// must carry, and a client certificate for mTLS). Plain TCP stays the default.
//
// Thread safety: a TlsContext is shared by every connection; Reload may run
// while connections are made (they use the files of before or after, whole).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "seedd/status.h"

namespace seedd {

struct TlsOptions {
  std::filesystem::path cert;  // PEM chain: this daemon's (or client's) certificate
  std::filesystem::path key;   // PEM private key of `cert`
  std::filesystem::path ca;    // PEM CA bundle peers are verified against
  // Server: require a client certificate chained to `ca` (mTLS).
  bool client_auth = false;
  // Client: the name the server's certificate must carry; empty: the host
  // connected to (a DNS name or an IP address).
  std::string server_name;
};

class TlsContext {
 public:
  // Loads the files: for a server `cert` and `key` are required; for a client
  // `ca` is (a client certificate is optional). Errors name the file and what is
  // wrong with it (unreadable, not PEM, a key that does not match, expired).
  static Result<std::shared_ptr<TlsContext>> Create(TlsOptions options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Reads the files again (a renewed certificate); connections made from now on
  // use them, connections open keep theirs. On error the files in use stay.
  Status Reload();
  const TlsOptions& options() const { return options_; }

  struct Rep;  // OpenSSL contexts (transport/tls.h)
  std::shared_ptr<Rep> rep() const;

 private:
  explicit TlsContext(TlsOptions options);
  const TlsOptions options_;
  struct Holder;
  std::unique_ptr<Holder> holder_;
};

}  // namespace seedd
