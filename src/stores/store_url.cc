#include "stores/store_url.h"

#include <charconv>

namespace seedd {

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    if (ec != std::errc() || end != s.data() + i + 3) return std::nullopt;
    out.push_back(static_cast<char>(v));
    i += 2;
  }
  return out;
}

Result<StoreUrl> StoreUrl::Parse(std::string_view url) {
  auto bad = [](std::string_view why) {
    return Status::InvalidArgument("malformed store URL: " + std::string(why));
  };
  if (url.size() > 4096) return bad("longer than 4096 bytes");
  StoreUrl out;
  size_t colon = url.find("://");
  if (colon == std::string_view::npos || colon == 0) return bad("expected SCHEME://...");
  out.scheme = std::string(url.substr(0, colon));
  for (char& c : out.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = url.substr(colon + 3);
  size_t q = rest.find('?');
  std::string_view query = q == std::string_view::npos ? "" : rest.substr(q + 1);
  rest = rest.substr(0, q);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t c = userinfo.find(':');
    auto user = PercentDecode(userinfo.substr(0, c));
    if (!user) return bad("bad percent-encoding in the user");
    if (!user->empty()) out.user = *user;
    if (c != std::string_view::npos) {
      auto pw = PercentDecode(userinfo.substr(c + 1));
      if (!pw) return bad("bad percent-encoding in the password");
      out.password = *pw;
    }
  }
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return bad("unterminated '[' in the host");
    std::string_view after = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after ']'");
      authority = after;  // ":port"
    } else {
      authority = "";
    }
  } else {
    size_t c = host.rfind(':');
    authority = c == std::string_view::npos ? "" : host.substr(c);
    host = host.substr(0, c);
  }
  if (!authority.empty()) {
    std::string_view port = authority.substr(1);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || v == 0 ||
        v > 65535) {
      return bad("port must be 1-65535");
    }
    out.port = static_cast<uint16_t>(v);
  }
  out.host = std::string(host);
  auto decoded_path = PercentDecode(path);
  if (!decoded_path) return bad("bad percent-encoding in the path");
  out.path = *decoded_path;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    auto k = PercentDecode(kv.substr(0, eq));
    auto v = PercentDecode(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
    if (!k || !v || k->empty()) return bad("bad query parameter");
    out.query[*k] = *v;
  }
  return out;
}

}  // namespace seedd
