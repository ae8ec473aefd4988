// Data connections authenticated without sending the token (docs/protocol.md,
// "Data connections"). A fetcher asks with a fresh nonce and no token; the
// source answers with its own nonce and a proof that it holds a fleet token;
// only then does the fetcher prove the same. Each proof is an HMAC-SHA256,
// keyed by a token, over the scheme, the side proving, the request's kind and
// root digest, both nonces and, over TLS, a value exported from the session
// (RFC 5705): a peer without a token learns nothing it can replay, and a proof
// made for one TLS session does not hold in another.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "seedd/json.h"
#include "seedd/tokens.h"

namespace seedd {

class Conn;

inline constexpr char kDataAuthScheme[] = "seedd-hmac-sha256/1";
inline constexpr size_t kDataNonceHexBytes = 32;  // 16 random bytes
inline constexpr size_t kMaxProofBytes = 4096;    // the fetcher's answer frame

// Whether `request` asks for the challenge (a valid "auth" and "nonce").
bool AsksForChallenge(const Json& request);

// The proof of `side` ("source" or "fetcher") holding `token` for `request`.
std::string DataProof(std::string_view token, std::string_view side, const Json& request,
                      std::string_view source_nonce, std::string_view binding);

// Whether `proof` is `side`'s proof for any token of `tokens`.
bool ProvedByAny(const TokenRing& tokens, std::string_view proof, std::string_view side,
                 const Json& request, std::string_view source_nonce, std::string_view binding);

// The value both ends of `conn` export from its TLS session, hex; empty when
// `conn` is plain.
std::string SessionBinding(Conn& conn);

}  // namespace seedd
