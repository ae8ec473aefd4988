#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <array>
#include <cassert>

namespace seedd {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string ToHex(const unsigned char* data, size_t n) {
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 0xf];
  }
  return out;
}

int B64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return ToHex(digest.data(), digest.size());
}

std::string Base64Encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  size_t rest = data.size() - i;
  if (rest == 1) {
    uint32_t v = p[i] << 16;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out += "==";
  } else if (rest == 2) {
    uint32_t v = (p[i] << 16) | (p[i + 1] << 8);
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return std::nullopt;
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    if (last && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    std::array<int, 4> v{};
    for (int j = 0; j < 4 - pad; ++j) {
      v[j] = B64Value(text[i + j]);
      if (v[j] < 0) return std::nullopt;
    }
    uint32_t word = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<char>((word >> 16) & 0xff));
    if (pad < 2) out.push_back(static_cast<char>((word >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(word & 0xff));
    // Canonical form only: the bits dropped by padding must be zero.
    if ((pad == 1 && (v[2] & 0x3)) || (pad == 2 && (v[1] & 0xf))) return std::nullopt;
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Length is not secret (as in hmac.compare_digest); contents are compared in constant time.
  if (a.size() != b.size()) {
    return false;
  }
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomHex(size_t n) {
  std::string bytes(n, '\0');
  int rc = RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n));
  assert(rc == 1 && "the OS random source failed");
  (void)rc;
  return ToHex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

}  // namespace seedd
