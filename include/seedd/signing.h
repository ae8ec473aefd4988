// Ed25519 signatures over what a fleet publishes: a weights manifest (its root
// digest) and a compile cache bundle (its bundle digest). A digest covers every
// byte the consumer installs (chunk and file digests are checked against the
// bytes), so one signature vouches for everything served under it.
//
// Keys are PEM files as OpenSSL writes them:
//   openssl genpkey -algorithm ed25519 -out sign.pem           (the publisher's)
//   openssl pkey -in sign.pem -pubout -out trust.pem           (its consumers')
// A key is named by its fingerprint, "ed25519:" and the first 32 hex digits of
// the SHA-256 of its 32-byte public key (`seedctl key fingerprint FILE`).
//
// What is signed is "seedd-signature/1\n<purpose>\n<digest>", the purpose
// ("weights-manifest", "compile-cache-bundle") keeping a signature from being
// taken for another kind of thing. A signed document carries
//   "signatures": [{"key": FINGERPRINT, "ed25519": BASE64 (64 bytes)}, ...]
// outside the digest it signs, so signatures can be added without changing it.
//
// Thread safety: SigningKey and TrustedKeys are immutable once loaded.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr std::string_view kManifestPurpose = "weights-manifest";
inline constexpr std::string_view kBundlePurpose = "compile-cache-bundle";
// A document with more signatures than this is refused unread.
inline constexpr size_t kMaxSignatures = 16;

struct Signature {
  std::string key;      // the signer's fingerprint
  std::string ed25519;  // base64 of the 64-byte signature
};

// "signatures" as a document carries them: an array of {"key", "ed25519"}.
Json SignaturesToJson(const std::vector<Signature>& signatures);
// Checks the shape only (at most kMaxSignatures; a fingerprint; 64 bytes of
// base64); a missing or null value is no signature. InvalidArgument otherwise.
Result<std::vector<Signature>> SignaturesFromJson(const Json* value);

class SigningKey {
 public:
  // An Ed25519 private key in PEM. Errors name the file and what is wrong (not
  // readable, not PEM, not Ed25519).
  static Result<std::shared_ptr<const SigningKey>> Load(const std::filesystem::path& pem);
  ~SigningKey();
  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;

  const std::string& fingerprint() const { return fingerprint_; }
  // The signature of `digest` for `purpose`.
  Signature Sign(std::string_view purpose, std::string_view digest) const;

 private:
  struct Rep;
  explicit SigningKey(std::unique_ptr<Rep> rep, std::string fingerprint);
  std::unique_ptr<Rep> rep_;
  std::string fingerprint_;
};

class TrustedKeys {
 public:
  // Ed25519 public keys in PEM (a private key file is taken as its public key);
  // errors name the file. Loading none gives a set that trusts nothing.
  static Result<std::shared_ptr<const TrustedKeys>> Load(
      const std::vector<std::filesystem::path>& pems);
  ~TrustedKeys();
  TrustedKeys(const TrustedKeys&) = delete;
  TrustedKeys& operator=(const TrustedKeys&) = delete;

  size_t size() const;
  // The fingerprints, comma-separated.
  std::string Describe() const;
  // Ok when one of `signatures` is a valid signature of `digest` for `purpose`
  // by a trusted key. Otherwise PermissionDenied naming `what` and why: it is
  // unsigned, signed only by keys not trusted (their fingerprints), or its
  // signature by a trusted key does not verify.
  Status Check(const std::vector<Signature>& signatures, std::string_view purpose,
               std::string_view digest, std::string_view what) const;

 private:
  struct Rep;
  explicit TrustedKeys(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// The fingerprint of the key in a PEM file (public or private).
Result<std::string> KeyFingerprint(const std::filesystem::path& pem);

}  // namespace seedd
