// The few pieces of S3's XML answers seedd reads (error codes, listings): the
// texts of a tag, unescaped. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace seedd {

std::string XmlUnescape(std::string s);
// `s` as XML text: &, < and > escaped.
std::string XmlEscape(std::string_view s);
// Every text of <tag>...</tag> in `xml`, in order.
std::vector<std::string> XmlAll(const std::string& xml, const std::string& tag);
// The first, or "".
std::string XmlFirst(const std::string& xml, const std::string& tag);

}  // namespace seedd
