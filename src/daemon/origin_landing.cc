#include "daemon/origin_landing.h"

#include "common/crypto.h"
#include "seedd/json_text.h"

namespace seedd {

Result<std::optional<HostPort>> LiveDigests::Read() {
  Result<std::optional<std::string>> text = registry_->Get(key_, 1024);
  if (!text.ok()) return text.status().WithContext("--registry");
  if (!text->has_value()) return std::optional<HostPort>();
  Result<Json> j = ParseJson(**text);
  auto is = [&](const char* key, uint64_t want) {
    return j->contains(key) && (*j)[key].is_number_unsigned() && (*j)[key].get<uint64_t>() == want;
  };
  if (!j.ok() || !j->is_object() || j->value("root", "") != root_ || !is("offset", offset_) ||
      !is("length", length_) || !j->contains("holder") || !(*j)["holder"].is_string()) {
    return std::optional<HostPort>();
  }
  Result<HostPort> holder = ParseHostPort((*j)["holder"].get<std::string>());
  if (!holder.ok()) return std::optional<HostPort>();
  ReadMore();
  return std::optional<HostPort>(*holder);
}

std::string LiveDigests::Get(uint32_t index) {
  {
    MutexLock lock(mu_);
    if (index < known_.size()) return known_[index];
  }
  ReadMore();
  MutexLock lock(mu_);
  return index < known_.size() ? known_[index] : "";
}

std::vector<std::string> LiveDigests::Known() {
  MutexLock lock(mu_);
  return known_;
}

void LiveDigests::ReadMore() {
  size_t from = 0;
  {
    MutexLock lock(mu_);
    from = known_.size();
  }
  if (from >= chunks_) return;
  Result<std::vector<std::string>> more = registry_->Range(list_key_, from, chunks_ - from, hex_);
  if (!more.ok()) return;
  MutexLock lock(mu_);
  if (known_.size() != from) return;  // read meanwhile by another thread
  for (const std::string& d : *more) {
    if (!IsLowerHex(d, hex_)) break;
    known_.push_back(d);
  }
}

LiveLanding::LiveLanding(std::shared_ptr<SwarmRegistry> registry, std::string key,
                         std::string list_key, std::string head,
                         std::shared_ptr<ChunkSet> available, const Manifest& manifest)
    : registry_(std::move(registry)),
      key_(std::move(key)),
      list_key_(std::move(list_key)),
      head_(std::move(head)),
      available_(std::move(available)),
      hasher_(manifest.chunk_digest) {
  for (const ManifestChunk& c : manifest.chunks) lengths_.push_back(c.length);
}

LiveLanding::~LiveLanding() {
  if (headed_) (void)registry_->Release(key_, head_);
}

void LiveLanding::Landed(std::string_view bytes) {
  while (!bytes.empty() && digests_.size() < lengths_.size()) {
    const uint64_t want = lengths_[digests_.size()] - in_chunk_;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(want, bytes.size()));
    hasher_.Update(bytes.substr(0, n));
    bytes.remove_prefix(n);
    in_chunk_ += n;
    if (in_chunk_ < lengths_[digests_.size()]) break;
    digests_.push_back(hasher_.HexDigest());
    hasher_.Reset();
    in_chunk_ = 0;
    const bool last = digests_.size() == lengths_.size();
    if (last || std::chrono::steady_clock::now() - put_ >= kEvery) Publish();
  }
}

void LiveLanding::Publish() {
  put_ = std::chrono::steady_clock::now();
  // A list left by a daemon that held this piece's claim before (it died, or
  // its fetch failed) is begun again: positions are chunks.
  if (!begun_) {
    if (!registry_->Delete(list_key_).ok()) return;
    begun_ = true;
  }
  std::vector<std::string> more(digests_.begin() + static_cast<std::ptrdiff_t>(listed_),
                                digests_.end());
  if (!registry_->Append(list_key_, more, kListTtl).ok()) return;
  listed_ = digests_.size();
  if (!headed_ || put_ - headed_at_ > kRecordTtl / 4) {
    if (!registry_->Put(key_, head_, kRecordTtl).ok()) return;
    headed_ = true;
    headed_at_ = put_;
  }
  for (; served_ < listed_; ++served_) available_->Set(served_);
}

}  // namespace seedd
