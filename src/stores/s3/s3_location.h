// Where an s3:// URL points: s3://BUCKET[/PREFIX]?endpoint=http(s)://HOST[:PORT]&region=R.
// Without an endpoint, AWS itself (virtual-hosted addressing); with one,
// path-style. The region comes from the URL, else AWS_REGION or
// AWS_DEFAULT_REGION, else us-east-1. Shared by the S3 store and the S3 origin.
// Pure function of its arguments and the environment; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

struct S3Location {
  std::string bucket;
  std::string prefix;  // without leading or trailing '/'
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port], no trailing '/'
  std::string host;      // the Host header
  bool path_style = true;
};

// InvalidArgument for a URL that is not one. Query parameters other than
// endpoint and region are left in *extra for the caller to read or refuse.
Result<S3Location> ParseS3Location(std::string_view url, std::map<std::string, std::string>* extra);

}  // namespace seedd
