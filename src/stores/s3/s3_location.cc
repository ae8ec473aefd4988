#include "stores/s3/s3_location.h"

#include <cstdlib>

#include "stores/store_url.h"

namespace seedd {

Result<S3Location> ParseS3Location(std::string_view url,
                                   std::map<std::string, std::string>* extra) {
  Result<StoreUrl> u = StoreUrl::Parse(url);
  if (!u.ok()) return u.status();
  if (u->scheme != "s3") return Status::InvalidArgument("not an s3:// URL");
  S3Location loc;
  loc.bucket = u->host;
  if (loc.bucket.size() < 3 || loc.bucket.size() > 63) {
    return Status::InvalidArgument("s3:// needs a bucket name of 3-63 characters");
  }
  if (loc.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos) {
    return Status::InvalidArgument("invalid bucket name '" + loc.bucket + "'");
  }
  loc.prefix = u->path;
  while (!loc.prefix.empty() && loc.prefix.front() == '/') loc.prefix.erase(0, 1);
  while (!loc.prefix.empty() && loc.prefix.back() == '/') loc.prefix.pop_back();
  if (const char* r = std::getenv("AWS_REGION"); r != nullptr && *r) {
    loc.region = r;
  } else if (const char* d = std::getenv("AWS_DEFAULT_REGION"); d != nullptr && *d) {
    loc.region = d;
  }
  for (const auto& [k, v] : u->query) {
    if (k == "region") {
      loc.region = v;
    } else if (k == "endpoint") {
      loc.endpoint = v;
    } else if (extra != nullptr) {
      (*extra)[k] = v;
    }
  }
  if (loc.endpoint.empty()) {
    loc.path_style = false;
    loc.host = loc.bucket + ".s3." + loc.region + ".amazonaws.com";
    loc.endpoint = "https://" + loc.host;
  } else {
    Result<StoreUrl> e = StoreUrl::Parse(loc.endpoint);
    if (!e.ok() || (e->scheme != "http" && e->scheme != "https") || e->host.empty()) {
      return Status::InvalidArgument("endpoint must be http://HOST[:PORT] or https://HOST[:PORT]");
    }
    while (!loc.endpoint.empty() && loc.endpoint.back() == '/') loc.endpoint.pop_back();
    loc.host = e->host + (e->port ? ":" + std::to_string(*e->port) : "");
  }
  return loc;
}

}  // namespace seedd
