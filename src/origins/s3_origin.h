// S3 and its compatibles as origins: every object below a prefix is a file of
// the model (its key without the prefix is its path).
//   s3://BUCKET/PREFIX[?endpoint=http(s)://HOST:PORT&region=R]
// Credentials as the S3 store reads them (AWS_ACCESS_KEY_ID..., or a profile
// of ~/.aws/credentials). A file's upstream digest: the x-amz-checksum-sha256 the
// object was uploaded with, else a single-part object's ETag (its MD5); a
// multipart object without a checksum has none (and is counted unverified).
// The version is the SHA-256 of the listing (every key, size and ETag): a
// changed object is a new version.
//
// Thread safety: S3Origin's methods may be called concurrently.
#pragma once

#include <string_view>

#include "origins/origin.h"

namespace seedd {

Result<OriginPtr> OpenS3Origin(std::string_view url, const OriginAccess& access);

}  // namespace seedd
