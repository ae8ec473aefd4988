// Ed25519 through OpenSSL's EVP interface (seedd/signing.h).
#include "seedd/signing.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "common/crypto.h"

namespace seedd {
namespace {

constexpr std::string_view kFingerprintPrefix = "ed25519:";
constexpr size_t kFingerprintHex = 32;
constexpr size_t kSignatureBytes = 64;

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not a PEM key";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

// The key in `pem`: a private key when `want_private`, else a public key or a
// private one (taken as its public key).
Result<Pkey> ReadKey(const std::filesystem::path& pem, bool want_private) {
  const std::string name = pem.string();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(name.c_str(), "r"), BIO_free);
  if (bio == nullptr) {
    ERR_clear_error();
    return Status::InvalidArgument("key " + name + ": cannot be read");
  }
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr && !want_private) {
    ERR_clear_error();
    BIO_reset(bio.get());
    key.reset(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  }
  if (key == nullptr) {
    return Status::InvalidArgument("key " + name + ": " +
                                   (want_private ? "not a PEM private key (" : "not a PEM key (") +
                                   OpenSslError() + ")");
  }
  ERR_clear_error();
  if (EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_ED25519) {
    return Status::InvalidArgument(
        "key " + name + ": not an Ed25519 key (make one with: openssl genpkey -algorithm ed25519)");
  }
  return key;
}

std::string Fingerprint(EVP_PKEY* key) {
  unsigned char raw[32];
  size_t n = sizeof(raw);
  if (EVP_PKEY_get_raw_public_key(key, raw, &n) != 1) return "";
  return std::string(kFingerprintPrefix) +
         Sha256Hex(std::string_view(reinterpret_cast<char*>(raw), n)).substr(0, kFingerprintHex);
}

std::string Message(std::string_view purpose, std::string_view digest) {
  std::string m = "seedd-signature/1\n";
  m.append(purpose);
  m += '\n';
  m.append(digest);
  return m;
}

bool IsFingerprint(std::string_view s) {
  return s.size() == kFingerprintPrefix.size() + kFingerprintHex &&
         s.substr(0, kFingerprintPrefix.size()) == kFingerprintPrefix &&
         IsLowerHex(s.substr(kFingerprintPrefix.size()), kFingerprintHex);
}

}  // namespace

Json SignaturesToJson(const std::vector<Signature>& signatures) {
  Json out = Json::array();
  for (const Signature& s : signatures) out.push_back({{"key", s.key}, {"ed25519", s.ed25519}});
  return out;
}

Result<std::vector<Signature>> SignaturesFromJson(const Json* value) {
  std::vector<Signature> out;
  if (value == nullptr || value->is_null()) return out;
  auto bad = [](const std::string& why) { return Status::InvalidArgument("signatures: " + why); };
  if (!value->is_array()) return bad("not an array");
  if (value->size() > kMaxSignatures) {
    return bad(std::to_string(value->size()) + " of them, more than " +
               std::to_string(kMaxSignatures));
  }
  for (const Json& s : *value) {
    if (!s.is_object()) return bad("an entry is not an object");
    auto key = s.find("key");
    auto sig = s.find("ed25519");
    if (key == s.end() || !key->is_string() || !IsFingerprint(key->get_ref<const std::string&>())) {
      return bad("an entry's 'key' is not a key fingerprint (ed25519:<32 hex digits>)");
    }
    if (sig == s.end() || !sig->is_string()) return bad("an entry has no 'ed25519' signature");
    std::optional<std::string> raw = Base64Decode(sig->get_ref<const std::string&>());
    if (!raw.has_value() || raw->size() != kSignatureBytes) {
      return bad("the signature by " + key->get<std::string>() + " is not 64 bytes of base64");
    }
    out.push_back({key->get<std::string>(), sig->get<std::string>()});
  }
  return out;
}

struct SigningKey::Rep {
  Pkey key;
};

SigningKey::SigningKey(std::unique_ptr<Rep> rep, std::string fingerprint)
    : rep_(std::move(rep)), fingerprint_(std::move(fingerprint)) {}
SigningKey::~SigningKey() = default;

Result<std::shared_ptr<const SigningKey>> SigningKey::Load(const std::filesystem::path& pem) {
  Result<Pkey> key = ReadKey(pem, true);
  if (!key.ok()) return key.status();
  std::string fp = Fingerprint(key->get());
  auto rep = std::make_unique<Rep>();
  rep->key = std::move(*key);
  return std::shared_ptr<const SigningKey>(new SigningKey(std::move(rep), std::move(fp)));
}

Signature SigningKey::Sign(std::string_view purpose, std::string_view digest) const {
  const std::string m = Message(purpose, digest);
  unsigned char sig[kSignatureBytes];
  size_t n = sizeof(sig);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, rep_->key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &n, reinterpret_cast<const unsigned char*>(m.data()),
                     m.size()) != 1 ||
      n != kSignatureBytes) {
    // Ed25519 signing with a loaded key fails only when memory does.
    std::abort();
  }
  return {fingerprint_, Base64Encode(std::string_view(reinterpret_cast<char*>(sig), n))};
}

struct TrustedKeys::Rep {
  std::vector<std::pair<std::string, Pkey>> keys;  // fingerprint, key
};

TrustedKeys::TrustedKeys(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
TrustedKeys::~TrustedKeys() = default;

Result<std::shared_ptr<const TrustedKeys>> TrustedKeys::Load(
    const std::vector<std::filesystem::path>& pems) {
  auto rep = std::make_unique<Rep>();
  for (const auto& pem : pems) {
    Result<Pkey> key = ReadKey(pem, false);
    if (!key.ok()) return key.status();
    std::string fp = Fingerprint(key->get());
    rep->keys.emplace_back(std::move(fp), std::move(*key));
  }
  return std::shared_ptr<const TrustedKeys>(new TrustedKeys(std::move(rep)));
}

size_t TrustedKeys::size() const { return rep_->keys.size(); }

std::string TrustedKeys::Describe() const {
  std::string out;
  for (const auto& [fp, key] : rep_->keys) out += (out.empty() ? "" : ", ") + fp;
  return out.empty() ? "none" : out;
}

Status TrustedKeys::Check(const std::vector<Signature>& signatures, std::string_view purpose,
                          std::string_view digest, std::string_view what) const {
  const std::string subject(what);
  if (signatures.empty()) {
    return Status::PermissionDenied(subject + " is not signed; trusted keys: " + Describe());
  }
  const std::string m = Message(purpose, digest);
  std::string others;
  bool failed = false;
  for (const Signature& s : signatures) {
    bool known = false;
    for (const auto& [fp, key] : rep_->keys) {
      if (fp != s.key) continue;
      known = true;
      std::optional<std::string> raw = Base64Decode(s.ed25519);
      if (!raw.has_value() || raw->size() != kSignatureBytes) continue;
      std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
      const bool valid =
          ctx != nullptr &&
          EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) == 1 &&
          EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(raw->data()),
                           raw->size(), reinterpret_cast<const unsigned char*>(m.data()),
                           m.size()) == 1;
      ERR_clear_error();
      if (valid) return Status::Ok();
    }
    if (known) {
      failed = true;
    } else if (others.find(s.key) == std::string::npos) {
      others += (others.empty() ? "" : ", ") + s.key;
    }
  }
  if (failed) {
    return Status::PermissionDenied(subject + ": its signature by a trusted key does not verify " +
                                    "(altered after signing, or forged)");
  }
  return Status::PermissionDenied(subject + " is signed by " + others +
                                  ", which is not trusted; trusted keys: " + Describe());
}

Result<std::string> KeyFingerprint(const std::filesystem::path& pem) {
  Result<Pkey> key = ReadKey(pem, false);
  if (!key.ok()) return key.status();
  return Fingerprint(key->get());
}

}  // namespace seedd
