#include "stores/s3/s3_xml.h"

#include <cstring>
#include <utility>

namespace seedd {

std::string XmlUnescape(std::string s) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + 1)) {
      s.replace(p, std::strlen(from), to);
    }
  }
  return s;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<std::string> XmlAll(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">";
  const std::string close = "</" + tag + ">";
  for (size_t p = xml.find(open); p != std::string::npos; p = xml.find(open, p)) {
    p += open.size();
    size_t e = xml.find(close, p);
    if (e == std::string::npos) break;
    out.push_back(XmlUnescape(xml.substr(p, e - p)));
    p = e + close.size();
  }
  return out;
}

std::string XmlFirst(const std::string& xml, const std::string& tag) {
  auto all = XmlAll(xml, tag);
  return all.empty() ? "" : all.front();
}

}  // namespace seedd
