#include "kinds/weights/files/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/errno_status.h"
#include "common/unique_fd.h"
#include "seedd/json_text.h"

namespace seedd {

uint64_t DtypeBytes(std::string_view dtype) {
  static const std::pair<std::string_view, uint64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix, uint64_t file_size) {
  auto bad = [](const std::string& why) { return Status::InvalidArgument("safetensors: " + why); };
  if (prefix.size() < 8 || file_size < 8) return bad("file shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(prefix[i]);
  if (n > kMaxSafetensorsHeaderBytes) {
    return bad("header of " + std::to_string(n) + " bytes is over the 100 MiB limit");
  }
  if (n > file_size - 8) {
    return bad("header of " + std::to_string(n) + " bytes is longer than the file (" +
               std::to_string(file_size) + " bytes)");
  }
  if (prefix.size() < 8 + n) return bad("header cut short");
  SafetensorsHeader out;
  out.header_bytes = n;
  out.header_json = std::string(prefix.substr(8, n));
  Result<Json> j = ParseJson(out.header_json);
  if (!j.ok() || !j->is_object()) return bad("header is not a JSON object");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file_size - data_start;
  for (auto it = j->begin(); it != j->end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const Json& t = it.value();
    const std::string& name = it.key();
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2) {
      return bad("tensor '" + name + "' needs dtype, shape and data_offsets");
    }
    TensorInfo info;
    info.name = name;
    info.dtype = t["dtype"].get<std::string>();
    const uint64_t elem = DtypeBytes(info.dtype);
    if (elem == 0) return bad("tensor '" + name + "' has unknown dtype '" + info.dtype + "'");
    unsigned __int128 count = 1;
    for (const Json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor '" + name + "' has a bad shape");
      info.shape.push_back(d.get<uint64_t>());
      count *= d.get<uint64_t>();
      if (count > (unsigned __int128)data_size) count = (unsigned __int128)data_size + 1;
    }
    const Json& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad("tensor '" + name + "' has bad data_offsets");
    }
    uint64_t b = off[0].get<uint64_t>();
    uint64_t e = off[1].get<uint64_t>();
    if (b > e || e > data_size) {
      return bad("tensor '" + name + "' data_offsets [" + std::to_string(b) + ", " +
                 std::to_string(e) + "] fall outside the " + std::to_string(data_size) +
                 " data bytes");
    }
    if (count * elem != (unsigned __int128)(e - b)) {
      return bad("tensor '" + name + "' holds " + std::to_string(e - b) +
                 " bytes, not what its dtype and shape need");
    }
    info.begin = data_start + b;
    info.end = data_start + e;
    out.tensors.push_back(std::move(info));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < out.tensors.size(); ++i) {
    if (out.tensors[i].begin < out.tensors[i - 1].end) {
      return bad("tensors '" + out.tensors[i - 1].name + "' and '" + out.tensors[i].name +
                 "' overlap");
    }
  }
  return out;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char len[8] = {};
  if (size < 8 || ::pread(fd.get(), len, 8, 0) != 8) {
    return Status::InvalidArgument(path +
                                   ": safetensors: file shorter than its 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(len[i]);
  // Bound the read by the limit and the file before allocating.
  uint64_t want = 8 + std::min<uint64_t>({n, kMaxSafetensorsHeaderBytes, size - 8});
  std::string prefix(want, '\0');
  std::memcpy(prefix.data(), len, 8);
  uint64_t have = 8;
  while (have < want) {
    ssize_t r = ::pread(fd.get(), prefix.data() + have, want - have, static_cast<off_t>(have));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return ErrnoStatus("read " + path, r < 0 ? errno : EIO);
    have += static_cast<uint64_t>(r);
  }
  Result<SafetensorsHeader> h = ParseSafetensorsHeader(prefix, size);
  if (!h.ok()) return h.status().WithContext(path);
  return h;
}

}  // namespace seedd
