// A model version pulled into a daemon's cache, and how it is trusted again
// after a restart. <cache>/weights/NAME/<root digest>/ holds the files; beside
// it, <root digest>.seedd-record.json holds the record written after the commit:
// {"format": "seedd.local/1", "manifest": {...}, "files": [{"path", "size",
// "mtime_ns"}]}. The directory is named by the root digest, which covers every
// chunk digest: a new checkpoint with the same files, sizes and headers is a new
// directory. A copy is reused or served only when its record names that root
// digest and every file still has the size and mtime recorded.
//
// Thread safety: functions of the filesystem; callers serialise pulls of one model.
#pragma once

#include <filesystem>

#include "kinds/weights/files/model_index.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr std::string_view kLocalRecordFormat = "seedd.local/1";

// The record of `dir`: <parent>/<name>.seedd-record.json.
std::filesystem::path LocalRecordPath(const std::filesystem::path& dir);

// Records the copy in `dir` (just committed) of `manifest`: its files' sizes and
// mtimes as they are now. Returns the copy as a model to serve (what
// LoadLocalCopy would read back).
Result<ServedModel> RecordLocalCopy(const std::filesystem::path& dir, const Manifest& manifest);

// The copy in `dir` as a model to serve, when its record names `root_digest` and
// no file changed since: NotFound without a record, DataLoss naming the file
// that changed (or went missing), InvalidArgument for a record of another version.
Result<ServedModel> LoadLocalCopy(const std::filesystem::path& dir, const std::string& root_digest);

// Removes a copy that cannot be trusted and its record: renamed aside first, so
// that its name is free at once and nothing half-removed is under it.
void DiscardLocalCopy(const std::filesystem::path& dir);

}  // namespace seedd
