// Hashing, encoding and comparison helpers (OpenSSL). Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace seedd {

// Lowercase hex of raw bytes.
std::string HexEncode(std::string_view bytes);
// Whether `s` is `min_size` to `max_size` lowercase hex digits (as HexEncode
// writes them); with one size, exactly that many.
bool IsLowerHex(std::string_view s, size_t min_size, size_t max_size);
inline bool IsLowerHex(std::string_view s, size_t size) { return IsLowerHex(s, size, size); }

// Lowercase hex SHA-256 of data.
std::string Sha256Hex(std::string_view data);

// SHA-256 over pieces: Update as the bytes come, then HexDigest once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view piece);
  std::string HexDigest();

 private:
  void* ctx_;  // EVP_MD_CTX
};

// Standard base64 (RFC 4648, with padding).
std::string Base64Encode(std::string_view data);
// Strict decoding: no whitespace, correct padding; nullopt on any malformed input.
std::optional<std::string> Base64Decode(std::string_view text);

// Compares in time independent of where the contents differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// `n` random bytes from the OS CSPRNG, hex encoded. Aborts when the CSPRNG
// fails (in every build): names made from it must not be guessable.
std::string RandomHexOrDie(size_t n);

}  // namespace seedd
