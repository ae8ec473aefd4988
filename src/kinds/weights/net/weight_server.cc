#include "kinds/weights/net/weight_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <thread>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "kinds/weights/proto/records.h"
#include "seedd/fleet.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "seedd/seed_config.h"
#include "transport/address_limits.h"
#include "wire/frame.h"

namespace seedd {
namespace {

constexpr size_t kMaxOpenFilesPerConnection = 16;

constexpr uint64_t kHeaderBytes = std::tuple_size_v<HeaderRecord>;

// Chunks up to this size are read and sent with their header in one write.
constexpr uint64_t kOneWriteChunkBytes = 64 * 1024;

// TCP_CORK for the scope: what is written joins into full segments, and the
// rest leaves at once when the scope ends.
class Cork {
 public:
  explicit Cork(int fd) : fd_(fd) { Set(1); }
  ~Cork() { Set(0); }
  Cork(const Cork&) = delete;
  Cork& operator=(const Cork&) = delete;

 private:
  void Set(int on) { (void)::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &on, sizeof(on)); }
  const int fd_;
};

// A chunk's header and its `length` bytes at `at` of `file` in one write.
bool SendSmallChunk(Conn& conn, int file, uint64_t at, uint32_t index, uint64_t length,
                    std::chrono::steady_clock::time_point deadline) {
  thread_local std::string buf;
  const HeaderRecord h = EncodeHeader(kChunkMagic, index, kChunkOk, 0, length);
  buf.assign(h.data(), h.size());
  buf.resize(h.size() + length);
  for (uint64_t got = 0; got < length;) {
    const ssize_t r =
        ::pread(file, buf.data() + h.size() + got, length - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // cut short: the fetcher sees the stream end
    got += static_cast<uint64_t>(r);
  }
  return conn.SendAllBy(buf.data(), buf.size(), deadline);
}

// The peer's address on `fd` (IPv6 by /64, as the listener's limits count it);
// "?" when unknown.
std::string PeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in&>(addr).sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6&>(addr).sin6_addr, text, sizeof(text));
  }
  return AddressLimits::Key(text);
}

// Why the file `st` describes (`failed`: the errno of a stat that failed) is no
// longer the one indexed, so that its digests are stale; empty when it is.
std::string ChangedSinceIndexed(const struct stat& st, int failed, const IndexedFile& indexed) {
  if (failed != 0) return std::string("cannot stat it: ") + std::strerror(failed);
  if (static_cast<uint64_t>(st.st_size) != indexed.size) {
    return "its size changed from " + std::to_string(indexed.size) + " to " +
           std::to_string(st.st_size) + " bytes";
  }
  if (MtimeNs(st) != indexed.mtime_ns) return "it was modified";
  return std::string();
}

// True when [offset, offset + length) of `fd` holds no data (a hole reads as zeros).
bool IsHole(int fd, uint64_t offset, uint64_t length) {
  off_t data = ::lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  if (data < 0) return errno == ENXIO;  // no data from offset to the end
  return static_cast<uint64_t>(data) >= offset + length;
}

}  // namespace

Result<uint64_t> ParseRate(std::string_view text, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(std::string(flag) + ": '" + std::string(text.substr(0, 64)) +
                                   "' " + std::string(why) +
                                   " (a number and a unit: kbit, mbit, gbit, kB, MB or GB, "
                                   "e.g. 45mbit or 2.5gbit; 0 for no limit)");
  };
  if (text == "0") return uint64_t{0};
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0 || digits > 20) return bad("is not a rate");
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(std::string(text.substr(0, digits)), &used);
    if (used != digits) return bad("is not a rate");
  } catch (const std::exception&) {
    return bad("is not a rate");
  }
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8},
      {"kB", 1e3},       {"MB", 1e6},       {"GB", 1e9}};
  const std::string_view unit = text.substr(digits);
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = value * scale;
    if (bytes < 1e3 || bytes > 1e13) return bad("is out of range (1 kB/s to 10 TB/s)");
    return static_cast<uint64_t>(bytes);
  }
  return bad(unit.empty() ? "has no unit" : "has an unknown unit");
}

WeightServer::WeightServer(std::vector<ServedModel> models, WeightServerOptions options)
    : options_(options),
      relay_pacing_(
          options.relay_upload_rate != 0 || options.relay_pacing != RelayPacingMode::kOff
              ? std::make_unique<RelayPacing>(options.relay_upload_rate, options.relay_pacing)
              : nullptr),
      rng_(std::random_device{}()),
      slots_(options_) {
  for (auto& m : models) Publish(std::move(m));
}

void WeightServer::Publish(ServedModel model) {
  if (model.root == nullptr) {
    Result<UniqueFd> root = OpenDirectory(model.dir);
    if (!root.ok()) {
      Logger().warn("weight_data: model {}: {}", model.manifest.model, root.status().message());
    }
    model.root = std::make_shared<const UniqueFd>(root.ok() ? std::move(*root) : UniqueFd());
  }
  if (model.text == nullptr) {
    Manifest without = model.manifest;
    without.sources.clear();
    const std::string text = DumpJson(without.ToJson());
    manifests_serialized_.fetch_add(1, std::memory_order_relaxed);
    constexpr std::string_view kSources = "\"sources\":[";  // a key: quotes unescaped
    const size_t at = text.find(kSources);
    if (at != std::string::npos) {
      const size_t split = at + kSources.size();
      model.text = std::make_shared<const ServedModel::Text>(
          ServedModel::Text{text.substr(0, split), text.substr(split)});
    }
  }
  auto m = std::make_shared<const ServedModel>(std::move(model));
  MutexLock lock(mu_);
  auto old = by_name_.find(m->manifest.model);
  if (old != by_name_.end() && old->second->manifest.root_digest != m->manifest.root_digest) {
    by_root_.erase(old->second->manifest.root_digest);
    swarms_.erase(old->second->manifest.root_digest);  // nobody fetches it here any more
  }
  by_name_[m->manifest.model] = m;
  by_root_[m->manifest.root_digest] = m;
}

std::shared_ptr<const ServedModel> WeightServer::FindModel(std::string_view name) const {
  MutexLock lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const ServedModel>> WeightServer::Models() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<const ServedModel>> models;
  for (const auto& [name, model] : by_name_) models.push_back(model);
  return models;
}

std::shared_ptr<const ServedModel> WeightServer::FindRoot(const std::string& root) const {
  MutexLock lock(mu_);
  auto it = by_root_.find(root);
  return it == by_root_.end() ? nullptr : it->second;
}

void WeightServer::Serve(Conn& conn, const Json& request) {
  connections_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_relaxed); }
  } leave{connections_};
  auto root_field = request.find("root_digest");
  const std::string root = root_field != request.end() && root_field->is_string()
                               ? root_field->get<std::string>()
                               : std::string();
  std::shared_ptr<const ServedModel> model = root.empty() ? nullptr : FindRoot(root);
  auto error = [this, &conn](const std::string& message) {
    std::string frame = EncodeJsonFrame(Json{{"status", "error"}, {"message", message}});
    conn.SendAllBy(frame.data(), frame.size(), SendBy(frame.size()));
  };
  if (model == nullptr) return error("no model with that root_digest");
  std::string relay;
  if (auto r = request.find("relay"); r != request.end()) {
    if (!r->is_string() || r->get<std::string>().size() > kMaxRelayNameBytes ||
        !ParseHostPort(r->get<std::string>()).ok()) {
      return error("invalid relay (expected HOST:PORT)");
    }
    relay = r->get<std::string>();
  }
  std::string session;
  if (auto r = request.find("session"); r != request.end()) {
    if (!r->is_string() || r->get<std::string>().size() > 64) {
      return error("invalid session (expected a string of at most 64 bytes)");
    }
    session = r->get<std::string>();
  }
  Asker asker;
  if (auto z = request.find("zone"); z != request.end()) {
    if (!z->is_string() || !IsZoneName(z->get<std::string>())) {
      return error("invalid zone (expected at most 64 letters, digits, - _ .)");
    }
    asker.zone = z->get<std::string>();
  }
  // "claim_holder": a "claimed" answer names the relay holding the claim.
  auto named = request.find("claim_holder");
  asker.name_holder = named != request.end() && named->is_boolean() && named->get<bool>();
  const size_t chunk_count = model->manifest.chunks.size();
  asker.peer = !relay.empty() && Announce(root, relay, session, chunk_count, asker.zone);
  asker.relay = std::move(relay);
  asker.session = std::move(session);
  // "wait_in_line": this server takes "SDRW" and "SDNW"; "watch_wanted": it
  // takes "SDWW" (older ones close the connection on them).
  Json answer{{"status", "ok"},
              {"chunks", chunk_count},
              {"wait_in_line", true},
              {"claim_holder", true},
              {"watch_wanted", true}};
  if (!options_.zone.empty()) answer["zone"] = options_.zone;
  std::string ok = EncodeJsonFrame(answer);
  if (!conn.SendAllBy(ok.data(), ok.size(), SendBy(ok.size()))) return;
  ServeRequests(conn, root, std::move(model), asker);
}

void WeightServer::WarnChanged(const ServedModel& model, const std::string& file,
                               const std::string& why) {
  {
    MutexLock lock(mu_);
    changed_.emplace(model.manifest.root_digest, file + ": " + why);
    if (!warned_.insert(model.manifest.root_digest + "/" + file).second) return;
  }
  Logger().error(
      "weight_data: not serving {} of model {}: {} since it was indexed; its chunk digests no "
      "longer describe it (restart seedd to index the model again)",
      (model.dir / file).string(), model.manifest.model, why);
}

Status WeightServer::CheckUnchanged(const ServedModel& model) {
  const std::string& root = model.manifest.root_digest;
  auto changed = [&](const std::string& what) {
    return Status::FailedPrecondition("model '" + model.manifest.model + "' changed on disk (" +
                                      what +
                                      ") since it was indexed; restart the serving daemon to "
                                      "index it again");
  };
  const size_t n = model.files.size();
  const size_t sweep = std::min(n, kUnchangedSweepFiles);
  size_t from = 0;
  {
    MutexLock lock(mu_);
    if (auto c = changed_.find(root); c != changed_.end()) return changed(c->second);
    if (sweep < n) {
      size_t& next = sweep_from_[root];
      from = next % n;
      next = (from + sweep) % n;
    }
  }
  auto it = std::next(model.files.begin(), static_cast<std::ptrdiff_t>(from));
  for (size_t i = 0; i < sweep; ++i, ++it) {
    if (it == model.files.end()) it = model.files.begin();
    const auto& [path, indexed] = *it;
    struct stat st {};
    const std::filesystem::path at = model.dir / indexed.read_path;
    const int failed = ::stat(at.c_str(), &st) != 0 ? errno : 0;
    const std::string why = ChangedSinceIndexed(st, failed, indexed);
    if (!why.empty()) return changed(path + ": " + why);
  }
  return Status::Ok();
}

void WeightServer::ServeRequests(Conn& conn, const std::string& root,
                                 std::shared_ptr<const ServedModel> model, const Asker& asker) {
  const bool peer = asker.peer;
  const std::string& relay = asker.relay;
  const bool name_holder = asker.name_holder;
  const size_t chunk_count = model->manifest.chunks.size();
  auto send_header = [&](std::string_view magic, uint32_t index, uint32_t status, uint32_t aux,
                         uint64_t length, std::chrono::steady_clock::time_point deadline) {
    const HeaderRecord h = EncodeHeader(magic, index, status, aux, length);
    return conn.SendAllBy(h.data(), h.size(), deadline);
  };
  auto deadline_for = [&](uint64_t n) { return SendBy(n); };
  struct Forget {  // its round trips, once the connection is done
    RelayPacing* pacing;
    const Conn& conn;
    ~Forget() {
      if (pacing != nullptr) pacing->Closed(conn);
    }
  } forget{relay_pacing_.get(), conn};
  std::set<std::string> reported;  // files counted as used on this connection
  std::map<std::string, UniqueFd, std::less<>> files;
  std::string address;                                        // the peer's, once it asks for a slot
  const std::string claimant = peer ? relay : std::string();  // who takes claims
  RequestRecord req;
  size_t have = 0;
  for (;;) {
    const long r = conn.RecvSome(req.data() + have, req.size() - have, options_.idle_timeout);
    if (r <= 0) return;  // the fetcher is done, or idle too long
    have += static_cast<size_t>(r);
    if (have < req.size()) continue;
    have = 0;
    const std::string_view magic(req.data(), 4);
    const bool state = magic == kStateMagic;
    const bool waiting = magic == kSendWaitingMagic || magic == kClaimWaitingMagic;
    const bool claim = magic == kClaimMagic || magic == kClaimWaitingMagic;
    const bool wanted = magic == kWatchWantedMagic;
    const bool watch = magic == kWatchMagic || wanted;
    if (!state && !claim && !watch && !waiting && magic != kSendMagic) return;  // not ours
    const uint32_t index = RequestIndex(req);
    // The chunks a filtered watch asks about follow its record.
    std::string bitmap;
    if (wanted) {
      bitmap.resize((chunk_count + 7) / 8);
      if (!conn.RecvAllBy(bitmap.data(), bitmap.size(), deadline_for(bitmap.size())).ok()) return;
    }
    // A fetching daemon publishes its model again when it completes: follow it.
    std::shared_ptr<const ServedModel> now = FindRoot(root);
    if (now == nullptr) return;  // no longer served
    if (now != model) {
      files.clear();
      model = std::move(now);
    }
    const auto& chunks = model->manifest.chunks;
    if (state || watch) {
      if (peer) Announce(root, relay, asker.session, chunk_count, asker.zone);
      if (!ServeState(conn, *model, watch, index, asker, bitmap)) return;
      continue;
    }
    const auto small = deadline_for(kHeaderBytes);
    if (index >= chunks.size() || (model->available && !model->available->Test(index))) {
      if (!send_header(kChunkMagic, index, kChunkNotHere, 0, 0, small)) return;
      continue;
    }
    // An upload slot, held until this chunk is sent.
    struct Slot {
      WeightServer* server = nullptr;  // set once taken
      uint64_t holder = 0;
      std::shared_ptr<std::atomic<uint64_t>> sent;  // bytes of this chunk sent so far
      Slot() = default;
      Slot(const Slot&) = delete;
      Slot& operator=(const Slot&) = delete;
      ~Slot() {
        if (server != nullptr) server->ReleaseSlot(holder);
      }
    } slot;
    if (peer && options_.upload_slots > 0) {
      slot.sent = std::make_shared<std::atomic<uint64_t>>(0);
      if (address.empty()) address = PeerAddress(conn.fd());
      if (!TakeSlot(relay, address, waiting, conn.fd(), slot.sent, &slot.holder)) {
        const auto retry = static_cast<uint32_t>(options_.busy_retry.count());
        if (!send_header(kChunkMagic, index, kChunkBusy, retry, 0, small)) return;
        continue;
      }
      slot.server = this;
    }
    uint32_t aux = 0;
    std::string holder;
    if (claim &&
        ClaimChunk(root, claimant, index, &aux, name_holder ? &holder : nullptr) == kChunkClaimed) {
      // The holder's name with the header, in one write (see below).
      const HeaderRecord h = EncodeHeader(kChunkMagic, index, kChunkClaimed, aux, holder.size());
      holder.insert(0, h.data(), h.size());
      if (!conn.SendAllBy(holder.data(), holder.size(), small)) return;
      continue;
    }
    const ManifestChunk& c = chunks[index];
    auto indexed = model->files.find(c.file);
    auto open = files.find(c.file);
    if (open == files.end()) {
      const std::string read_path =
          indexed != model->files.end() ? indexed->second.read_path : c.file;
      Result<UniqueFd> opened = Status::Unavailable("no root");
      if (model->root != nullptr && model->root->valid()) {
        opened = OpenBeneath(model->root->get(), read_path, O_RDONLY);
      }
      if (!opened.ok()) {
        if (model->available == nullptr) {
          Logger().warn("weight_data: cannot serve {} of model {}: {}", c.file,
                        model->manifest.model, opened.status().message());
        }
        EndSend(root, claimant, index, false);
        if (!send_header(kChunkMagic, index, kChunkNotHere, 0, 0, small)) return;
        continue;
      }
      if (files.size() >= kMaxOpenFilesPerConnection) files.clear();  // a model of many files
      open = files.emplace(c.file, std::move(*opened)).first;
    }
    const int file = open->second.get();
    // A file with as many blocks as bytes has no hole to look for.
    bool dense = false;
    if (indexed != model->files.end()) {
      // Whatever changed the file since it was indexed, its digests are stale.
      struct stat st {};
      const int failed = ::fstat(file, &st) != 0 ? errno : 0;
      const std::string why = ChangedSinceIndexed(st, failed, indexed->second);
      if (!why.empty()) {
        WarnChanged(*model, c.file, why);
        EndSend(root, claimant, index, false);
        if (!send_header(kChunkMagic, index, kChunkNotHere, 0, 0, small)) return;
        continue;
      }
      dense = static_cast<uint64_t>(st.st_blocks) * 512 >= static_cast<uint64_t>(st.st_size);
    }
    const uint64_t at = c.offset + (indexed != model->files.end() ? indexed->second.offset : 0);
    if (!dense && IsHole(file, at, c.length)) {
      EndSend(root, claimant, index, true);
      if (!send_header(kChunkMagic, index, kChunkHole, 0, 0, small)) return;
      continue;
    }
    // The whole chunk within its deadline: a fetcher that stops reading (or reads
    // a trickle) does not hold this thread.
    const auto deadline = deadline_for(kHeaderBytes + c.length);
    auto count = [&](uint64_t w) {
      if (slot.sent != nullptr) slot.sent->fetch_add(w, std::memory_order_relaxed);
      bytes_served_.fetch_add(w, std::memory_order_relaxed);
      metrics::BytesSent(metrics::Plane::kData, w);
      if (model->pulled) metrics::RelayBytesSent(w);
    };
    // The header and the chunk leave together, its last segment at once. Sent
    // apart, a small chunk (or a large one's last part) waited under Nagle's
    // rule for the acknowledgement of what went before it, which the fetcher,
    // waiting for the rest, delayed (about 40 ms a chunk: a model of small files
    // is a request per file). A small chunk is one write; a larger one is
    // corked from its header to its end (paced pieces then join, too).
    const bool paced = relay_pacing_ != nullptr && model->available != nullptr;
    bool sent;
    if (c.length <= kOneWriteChunkBytes && !paced) {
      sent = SendSmallChunk(conn, file, at, index, c.length, deadline);
      if (sent) count(c.length);
    } else {
      Cork cork(conn.fd());
      sent = send_header(kChunkMagic, index, kChunkOk, 0, c.length, deadline);
      // Held to the relay rate while this host still pulls the model.
      if (paced) {
        sent = sent && relay_pacing_->SendFile(conn, file, static_cast<off_t>(at), c.length,
                                               deadline, count);
      } else {
        sent = sent && conn.SendFileBy(file, static_cast<off_t>(at), c.length, deadline, count);
      }
    }
    EndSend(root, claimant, index, sent);
    if (!sent) return;
    if (relay.empty() && options_.served_to_client && reported.insert(c.file).second) {
      options_.served_to_client(model->manifest.model, c.file);
    }
  }
}

bool WeightServer::ServeState(Conn& conn, const ServedModel& model, bool watch, uint32_t cursor,
                              const Asker& asker, std::string_view wanted) {
  const size_t chunks = model.manifest.chunks.size();
  std::string body;
  uint64_t next = 0;
  uint32_t aux = 0;
  if (watch) {
    if (model.available == nullptr) {
      aux = kHaveComplete;  // nothing more will come
    } else {
      for (uint32_t c : model.available->Since(cursor, kWatchWait, &next, wanted)) {
        const uint32_t be = htonl(c);
        body.append(reinterpret_cast<const char*>(&be), sizeof(be));
      }
    }
  } else {
    if (model.available) {
      body = model.available->Bitmap(&next);
    } else {
      body.assign((chunks + 7) / 8, '\xff');
      if (chunks % 8 != 0) body.back() = static_cast<char>(0xff00 >> (chunks % 8));
    }
    aux = static_cast<uint32_t>(next);
    // "HOST:PORT ZONE" to an asker that said a zone, for relays that said one.
    for (const ListedRelay& r : ListPeers(model.manifest.root_digest, asker.relay,
                                          options_.max_peers_listed, asker.zone)) {
      body += r.name;
      if (!asker.zone.empty() && !r.zone.empty()) body += " " + r.zone;
      body += "\n";
    }
  }
  const auto deadline = SendBy(kHeaderBytes + body.size());
  const HeaderRecord h = EncodeHeader(watch ? kHaveMagic : kStateMagic, static_cast<uint32_t>(next),
                                      kChunkOk, aux, body.size());
  // Header and body in one write. Written in two, the body waited under
  // Nagle's rule (these sockets keep it: a chunk's header joins its first
  // segment) for the acknowledgement of the header, which the fetcher,
  // waiting for the body, delayed: about 40 ms per answer, and a watch is
  // answered for every chunk this host verifies, to each of its watchers.
  body.insert(0, h.data(), h.size());
  return conn.SendAllBy(body.data(), body.size(), deadline);
}

}  // namespace seedd
