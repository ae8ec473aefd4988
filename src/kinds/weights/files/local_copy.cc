#include "kinds/weights/files/local_copy.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>

#include "common/crypto.h"
#include "common/file_util.h"
#include "seedd/json_text.h"

namespace seedd {
namespace {

constexpr uint64_t kMaxRecordBytes = 256ull << 20;  // a manifest of 100,000 files fits

Result<IndexedFile> StatBelow(int dir_fd, const std::string& path) {
  Result<UniqueFd> fd = OpenBeneath(dir_fd, path, O_PATH);
  if (!fd.ok()) return fd.status();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Status::IoError("cannot stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  return IndexedFile{path, static_cast<uint64_t>(st.st_size), MtimeNs(st)};
}

}  // namespace

std::filesystem::path LocalRecordPath(const std::filesystem::path& dir) {
  return dir.parent_path() / (dir.filename().string() + ".seedd-record.json");
}

Result<ServedModel> RecordLocalCopy(const std::filesystem::path& dir, const Manifest& manifest) {
  Result<UniqueFd> root = OpenDirectory(dir);
  if (!root.ok()) return root.status();
  ServedModel served;
  served.manifest = manifest;
  served.manifest.sources.clear();  // where it came from is not what it is
  Json files = Json::array();
  for (const ManifestFile& f : served.manifest.files) {
    Result<IndexedFile> st = StatBelow(root->get(), f.path);
    if (!st.ok()) return st.status();
    if (st->size != f.size) {
      return Status::DataLoss(f.path + " has " + std::to_string(st->size) + " bytes, not " +
                              std::to_string(f.size));
    }
    files.push_back({{"path", f.path}, {"size", st->size}, {"mtime_ns", st->mtime_ns}});
    served.files.emplace(f.path, std::move(*st));
  }
  Json record = {{"format", kLocalRecordFormat},
                 {"manifest", served.manifest.ToJson()},
                 {"files", std::move(files)}};
  SEEDD_RETURN_IF_ERROR(WriteFileAtomic(LocalRecordPath(dir), DumpJson(record)));
  served.dir = dir;
  served.root = std::make_shared<const UniqueFd>(std::move(*root));
  return served;
}

Result<ServedModel> LoadLocalCopy(const std::filesystem::path& dir,
                                  const std::string& root_digest) {
  const std::filesystem::path record_path = LocalRecordPath(dir);
  std::ifstream in(record_path, std::ios::binary);
  if (!in) return Status::NotFound("no record of the copy in " + dir.string());
  std::string text;
  text.resize(kMaxRecordBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto bad = [&](const std::string& why) {
    return Status::DataLoss("the record " + record_path.string() + " " + why);
  };
  if (text.size() > kMaxRecordBytes) return bad("is too large");
  Result<Json> record = ParseJson(text);
  if (!record.ok() || !record->is_object()) return bad("is not a JSON object");
  if (record->value("format", "") != kLocalRecordFormat) {
    return bad("has an unknown format (expected " + std::string(kLocalRecordFormat) + ")");
  }
  if (!record->contains("manifest") || !record->contains("files") ||
      !(*record)["files"].is_array()) {
    return bad("lacks its manifest or files");
  }
  Result<Manifest> manifest = ParseManifest((*record)["manifest"]);
  if (!manifest.ok()) return bad("holds a bad manifest: " + manifest.status().message());
  if (manifest->root_digest != root_digest) {
    return Status::InvalidArgument("the copy in " + dir.string() + " is of root digest " +
                                   manifest->root_digest + ", not " + root_digest);
  }
  const Json& files = (*record)["files"];
  if (files.size() != manifest->files.size()) return bad("does not list every file");
  Result<UniqueFd> root = OpenDirectory(dir);
  if (!root.ok()) return root.status();
  ServedModel served;
  for (size_t i = 0; i < files.size(); ++i) {
    const ManifestFile& f = manifest->files[i];
    const Json& r = files[i];
    if (!r.is_object() || r.value("path", "") != f.path || !r.contains("size") ||
        !r["size"].is_number_unsigned() || !r.contains("mtime_ns") ||
        !r["mtime_ns"].is_number_integer()) {
      return bad("has a bad entry for " + f.path);
    }
    Result<IndexedFile> now = StatBelow(root->get(), f.path);
    if (!now.ok())
      return Status::DataLoss(f.path + " of the local copy: " + now.status().message());
    if (now->size != f.size || now->size != r["size"].get<uint64_t>()) {
      return Status::DataLoss((dir / f.path).string() + " changed after it was pulled: " +
                              std::to_string(now->size) + " bytes, not " + std::to_string(f.size));
    }
    if (now->mtime_ns != r["mtime_ns"].get<int64_t>()) {
      return Status::DataLoss((dir / f.path).string() +
                              " was modified after it was pulled (its mtime changed)");
    }
    served.files.emplace(f.path, std::move(*now));
  }
  served.manifest = std::move(*manifest);
  served.dir = dir;
  served.root = std::make_shared<const UniqueFd>(std::move(*root));
  return served;
}

void DiscardLocalCopy(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove(LocalRecordPath(dir), ec);
  const std::filesystem::path aside =
      dir.parent_path() / (".seedd-discard-" + dir.filename().string() + "-" + RandomHexOrDie(4));
  std::filesystem::rename(dir, aside, ec);
  std::filesystem::remove_all(ec ? dir : aside, ec);
}

}  // namespace seedd
