// S3 and its compatibles as origins: every object below a prefix is a file of
// the model (its key without the prefix is its path).
//   s3://BUCKET/PREFIX[?endpoint=http(s)://HOST:PORT&region=R]
// Credentials as the S3 store reads them (AWS_ACCESS_KEY_ID..., or a profile
// of ~/.aws/credentials). A file's upstream digest: the x-amz-checksum-sha256 the
// object was uploaded with, else a single-part object's ETag (its MD5); for a
// multipart object (its ETag no MD5), a HEAD's full-object SHA-256 checksum or
// x-amz-meta-sha256 (as `seedctl push` uploads them); one with neither has none
// (and is counted unverified).
// The version is the SHA-256 of the listing (every key, size and ETag): a
// changed object is a new version.
//
// Thread safety: S3Origin's methods may be called concurrently.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

#include "origins/origin.h"

namespace seedd {

Result<OriginPtr> OpenS3Origin(std::string_view url, const OriginAccess& access);

// The files below `dir` written below the prefix of `url`, one object per file
// (its path the key less the prefix), each PUT with its x-amz-checksum-sha256
// (S3 checks it and keeps it: readers verify against it) and signed with its
// SHA-256: what `--model NAME=s3://...` reads. A file over
// OriginAccess::push_part_bytes (default: over one PUT's 5 GiB) goes up as a
// multipart upload (each part with its checksum, the file's SHA-256 as
// x-amz-meta-sha256), aborted when a part fails; one over 5 TiB is refused
// before any byte is sent.
// OriginPush::manifest is the version a reader will see (the listing's
// digest, read back after the upload).
Result<OriginPush> PushS3Dir(std::string_view url, const std::filesystem::path& dir,
                             const OriginAccess& access,
                             const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace seedd
