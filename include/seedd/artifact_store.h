// Artifact stores: byte values under validated keys "<kind>/<config_hash>/<filename>".
//
// Thread safety: every ArtifactStore implementation is thread-safe; concurrent
// Puts of one key leave exactly one complete value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/status.h"

namespace seedd {

// Each part is 1-255 bytes, has no '/', '\\' or NUL, is not "." or "..", and does
// not start with the reserved temporary-file prefix ".seedd~".
class ArtifactKey {
 public:
  static Result<ArtifactKey> Make(std::string_view kind, std::string_view config_hash,
                                  std::string_view filename);
  // Parses "<kind>/<config_hash>/<filename>".
  static Result<ArtifactKey> Parse(std::string_view text);
  // Validates one part; the error names it ("invalid kind '...': ...").
  static Status ValidatePart(std::string_view what, std::string_view part);

  const std::string& kind() const { return kind_; }
  const std::string& config_hash() const { return config_hash_; }
  const std::string& filename() const { return filename_; }
  std::string ToString() const { return kind_ + "/" + config_hash_ + "/" + filename_; }

 private:
  ArtifactKey(std::string k, std::string h, std::string f)
      : kind_(std::move(k)), config_hash_(std::move(h)), filename_(std::move(f)) {}
  std::string kind_;
  std::string config_hash_;
  std::string filename_;
};

class ArtifactStore {
 public:
  ArtifactStore() = default;
  ArtifactStore(const ArtifactStore&) = delete;
  ArtifactStore& operator=(const ArtifactStore&) = delete;
  virtual ~ArtifactStore() = default;

  // The value, nullopt on a miss, or an error (I/O, over the size limit, ...).
  virtual Result<std::optional<std::string>> Get(const ArtifactKey& key) = 0;
  // What GetNow found.
  struct Now {
    // The bytes; nullopt on a miss, or when `unchanged`.
    std::optional<std::string> value;
    // Identifies the stored bytes (a disk store: the file's device, inode, size,
    // modification and change times): it differs whenever they may have changed.
    // Empty on a miss, or where the store keeps no such identity.
    std::string version;
    // The stored bytes still have the caller's `known` version: not read again.
    bool unchanged = false;
  };
  // Get, when the store can answer without blocking: true with *now set (the
  // bytes, or a miss, or that they are unchanged since the caller read them with
  // version `known`); false when the answer could block (a network store, a name
  // or bytes not in the kernel's caches), the value is larger than `max_bytes`,
  // or anything went wrong: then ask Get. The listener answers small local
  // artifacts on its own thread with it. The default: false.
  virtual bool GetNow(const ArtifactKey& key, size_t max_bytes, std::string_view known, Now* now) {
    (void)key;
    (void)max_bytes;
    (void)known;
    (void)now;
    return false;
  }
  // Stores `value` atomically: readers see the old value or the new one, whole.
  virtual Status Put(const ArtifactKey& key, std::string_view value) = 0;
  // Every key whose text ("<kind>/<config_hash>/<filename>") starts with `prefix`,
  // sorted.
  virtual Result<std::vector<std::string>> List(std::string_view prefix) = 0;
  // Removes the key; removing a missing key is not an error.
  virtual Status Delete(const ArtifactKey& key) = 0;
  // A short description for logs (no credentials).
  virtual std::string Describe() const = 0;
};

using ArtifactStorePtr = std::unique_ptr<ArtifactStore>;

// Forwards every call to a wrapped store; override one method to inject a fault.
class ArtifactStoreWrapper : public ArtifactStore {
 public:
  explicit ArtifactStoreWrapper(ArtifactStorePtr inner) : inner_(std::move(inner)) {}
  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    return inner_->Get(key);
  }
  bool GetNow(const ArtifactKey& key, size_t max_bytes, std::string_view known, Now* now) override {
    return inner_->GetNow(key, max_bytes, known, now);
  }
  Status Put(const ArtifactKey& key, std::string_view value) override {
    return inner_->Put(key, value);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  Status Delete(const ArtifactKey& key) override { return inner_->Delete(key); }
  std::string Describe() const override { return inner_->Describe(); }

 protected:
  ArtifactStore& inner() { return *inner_; }

 private:
  ArtifactStorePtr inner_;
};

// Values in a map; for unit tests.
ArtifactStorePtr NewMemoryArtifactStore();

// The largest value a shared store (S3, Redis) hands back: a larger one is
// refused before it is read (its Content-Length, the bytes streamed, its
// STRLEN), so a store's writer cannot make a daemon read without bound.
inline constexpr uint64_t kMaxSharedValueBytes = 64ull * 1024 * 1024;
// The most keys a listing of a shared store returns (pages read until then).
inline constexpr size_t kMaxListedKeys = 100000;

struct DiskStoreOptions {
  // Get fails for larger files instead of reading them.
  uint64_t max_value_bytes = 64ull * 1024 * 1024;
};

// Files under `root`. With a non-empty `kind`, only keys of that kind are accepted
// and "<kind>/<hash>/<file>" maps to root/<hash>/<file>; with an empty `kind`,
// any key maps to root/<kind>/<hash>/<file>. Writes go to a temporary file in the
// same directory, are fsynced, renamed into place and the directory fsynced.
// Symbolic links under root are never followed.
ArtifactStorePtr NewDiskArtifactStore(std::string kind, std::filesystem::path root,
                                      DiskStoreOptions options = {});

}  // namespace seedd
