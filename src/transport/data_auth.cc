#include "transport/data_auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/crypto.h"
#include "transport/tls.h"

namespace seedd {

bool AsksForChallenge(const Json& request) {
  if (!request.is_object()) return false;
  auto auth = request.find("auth");
  auto nonce = request.find("nonce");
  return auth != request.end() && *auth == kDataAuthScheme && nonce != request.end() &&
         nonce->is_string() && IsLowerHex(nonce->get_ref<const std::string&>(), kDataNonceHexBytes);
}

std::string DataProof(std::string_view token, std::string_view side, const Json& request,
                      std::string_view source_nonce, std::string_view binding) {
  std::string message = std::string(kDataAuthScheme) + "\n" + std::string(side) + "\n";
  for (const char* field : {"kind", "root_digest", "nonce"}) {
    auto it = request.find(field);
    message += (it != request.end() && it->is_string()) ? it->get<std::string>() : "";
    message += "\n";
  }
  message += std::string(source_nonce) + "\n" + std::string(binding);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(mac), len));
}

bool ProvedByAny(const TokenRing& tokens, std::string_view proof, std::string_view side,
                 const Json& request, std::string_view source_nonce, std::string_view binding) {
  return tokens.AnyOf([&](std::string_view token) {
    return ConstantTimeEquals(proof, DataProof(token, side, request, source_nonce, binding));
  });
}

std::string SessionBinding(Conn& conn) { return conn.ExportedKey("EXPORTER-seedd-data"); }

}  // namespace seedd
