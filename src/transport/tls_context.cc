// TlsContext: the OpenSSL contexts built from --tls-cert, --tls-key and
// --tls-ca, checked when built, and rebuilt on Reload (a SIGHUP).
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <string>

#include "common/mutex.h"
#include "seedd/logging.h"
#include "transport/tls.h"

namespace seedd {

std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    // "error:0A000086:SSL routines::certificate verify failed" → the reason.
    std::string text = buf;
    const size_t colon = text.rfind(':');
    if (colon != std::string::npos) text = text.substr(colon + 1);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "no detail" : out;
}

namespace {

std::string Describe(const std::filesystem::path& p) { return p.string(); }

Status LoadCertAndKey(SSL_CTX* ctx, const TlsOptions& o) {
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert.c_str()) != 1) {
    return Status::InvalidArgument("--tls-cert " + Describe(o.cert) +
                                   ": not a readable PEM certificate (" + SslErrors() + ")");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, o.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return Status::InvalidArgument("--tls-key " + Describe(o.key) +
                                   ": not a readable PEM private key (" + SslErrors() + ")");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return Status::InvalidArgument("--tls-key " + Describe(o.key) + " does not match --tls-cert " +
                                   Describe(o.cert));
  }
  X509* cert = SSL_CTX_get0_certificate(ctx);
  if (cert != nullptr && X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    // Loaded anyway: peers refuse it, and say so; a renewal is a SIGHUP away.
    Logger().error("--tls-cert {} has expired: peers will refuse it until it is renewed",
                   Describe(o.cert));
  }
  return Status::Ok();
}

Status LoadCa(SSL_CTX* ctx, const TlsOptions& o) {
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(ctx, o.ca.c_str(), nullptr) != 1) {
    return Status::InvalidArgument("--tls-ca " + Describe(o.ca) +
                                   ": not a readable PEM CA bundle (" + SslErrors() + ")");
  }
  return Status::Ok();
}

SSL_CTX* NewContext(const SSL_METHOD* method) {
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // Kernel TLS where the kernel offers it; no session tickets (nothing resumes,
  // and a ticket arriving after the handshake would be data for nobody).
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  // Read what the socket has, up to 256 KiB, at once rather than a record (16 KiB)
  // per read: a 2 MiB chunk takes 8 reads instead of 128.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 256 * 1024);
  return ctx;
}

Result<std::shared_ptr<TlsContext::Rep>> Build(const TlsOptions& o) {
  auto rep = std::make_shared<TlsContext::Rep>();
  if (!o.cert.empty() || !o.key.empty()) {
    if (o.cert.empty() || o.key.empty()) {
      return Status::InvalidArgument("--tls-cert and --tls-key go together");
    }
    rep->server = NewContext(TLS_server_method());
    if (rep->server == nullptr) return Status::Internal("SSL_CTX_new: " + SslErrors());
    SEEDD_RETURN_IF_ERROR(LoadCertAndKey(rep->server, o));
    if (o.client_auth) {
      if (o.ca.empty()) {
        return Status::InvalidArgument("--tls-client-auth needs --tls-ca (the CA of the clients)");
      }
      SEEDD_RETURN_IF_ERROR(LoadCa(rep->server, o));
      SSL_CTX_set_verify(rep->server, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
  }
  if (!o.ca.empty()) {
    rep->client = NewContext(TLS_client_method());
    if (rep->client == nullptr) return Status::Internal("SSL_CTX_new: " + SslErrors());
    SEEDD_RETURN_IF_ERROR(LoadCa(rep->client, o));
    SSL_CTX_set_verify(rep->client, SSL_VERIFY_PEER, nullptr);
    if (!o.cert.empty()) SEEDD_RETURN_IF_ERROR(LoadCertAndKey(rep->client, o));
  }
  if (rep->server == nullptr && rep->client == nullptr) {
    return Status::InvalidArgument("TLS needs --tls-cert and --tls-key, or --tls-ca");
  }
  return rep;
}

}  // namespace

TlsContext::Rep::~Rep() {
  if (server != nullptr) SSL_CTX_free(server);
  if (client != nullptr) SSL_CTX_free(client);
}

struct TlsContext::Holder {
  mutable Mutex mu;
  std::shared_ptr<Rep> rep GUARDED_BY(mu);
};

TlsContext::TlsContext(TlsOptions options)
    : options_(std::move(options)), holder_(std::make_unique<Holder>()) {}

TlsContext::~TlsContext() = default;

Result<std::shared_ptr<TlsContext>> TlsContext::Create(TlsOptions options) {
  auto ctx = std::shared_ptr<TlsContext>(new TlsContext(std::move(options)));
  SEEDD_RETURN_IF_ERROR(ctx->Reload());
  return ctx;
}

Status TlsContext::Reload() {
  Result<std::shared_ptr<Rep>> built = Build(options_);
  if (!built.ok()) return built.status();
  MutexLock lock(holder_->mu);
  holder_->rep = std::move(*built);
  return Status::Ok();
}

std::shared_ptr<TlsContext::Rep> TlsContext::rep() const {
  MutexLock lock(holder_->mu);
  return holder_->rep;
}

}  // namespace seedd
