#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <array>
#include <cassert>
#include <cstdio>
#include <cstdlib>

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

constexpr std::array<int8_t, 256> kB64Values = [] {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kB64[i])] = static_cast<int8_t>(i);
  return t;
}();

int B64Value(char c) { return kB64Values[static_cast<unsigned char>(c)]; }

}  // namespace

std::string HexEncode(std::string_view bytes) {
  return ToHex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

bool IsLowerHex(std::string_view s, size_t min_size, size_t max_size) {
  if (s.size() < min_size || s.size() > max_size) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return ToHex(digest.data(), digest.size());
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    std::fprintf(stderr, "seedd: cannot start a SHA-256 digest\n");
    std::abort();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(std::string_view piece) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), piece.data(), piece.size());
}

std::string Sha256::HexDigest() {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest.data(), &n);
  return ToHex(digest.data(), n);
}

std::string Base64Encode(std::string_view data) {
  std::string out((data.size() + 2) / 3 * 4, '\0');
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  char* o = out.data();
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3, o += 4) {
    uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    o[0] = kB64[(v >> 18) & 63];
    o[1] = kB64[(v >> 12) & 63];
    o[2] = kB64[(v >> 6) & 63];
    o[3] = kB64[v & 63];
  }
  size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = (p[i] << 16) | (rest == 2 ? p[i + 1] << 8 : 0);
    o[0] = kB64[(v >> 18) & 63];
    o[1] = kB64[(v >> 12) & 63];
    o[2] = rest == 2 ? kB64[(v >> 6) & 63] : '=';
    o[3] = '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return std::nullopt;
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  // Fast path for whole groups; the last group (padding) goes through the checks below.
  size_t i = 0;
  const size_t body = text.size() < 4 ? 0 : text.size() - 4;
  out.resize(body / 4 * 3);
  char* o = out.data();
  for (; i < body; i += 4, o += 3) {
    int a = B64Value(text[i]), b = B64Value(text[i + 1]), c = B64Value(text[i + 2]),
        d = B64Value(text[i + 3]);
    if ((a | b | c | d) < 0) return std::nullopt;
    uint32_t word = (a << 18) | (b << 12) | (c << 6) | d;
    o[0] = static_cast<char>(word >> 16);
    o[1] = static_cast<char>((word >> 8) & 0xff);
    o[2] = static_cast<char>(word & 0xff);
  }
  for (; i < text.size(); i += 4) {
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

std::string RandomHexOrDie(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    // Names built from it (staging, sessions) would be predictable: no way on.
    std::fprintf(stderr, "seedd: the random source failed (RAND_bytes); stopping\n");
    std::abort();
  }
  return ToHex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

}  // namespace seedd
