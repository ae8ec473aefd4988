// libseedd_c (include/seedd/seedd_c.h): the C API over libseedd's public C++
// API, JSON text in and out. Only the seedd_* symbols are exported
// (seedd_c.map); libseedd and its C++ dependencies stay inside.
//
// Thread safety: as the header says; a pull's state is behind its mutex.
#include "seedd/seedd_c.h"

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "seedd/client.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "seedd/origins.h"
#include "seedd/seed_transport.h"
#include "seedd/seedable.h"
#include "seedd/signing.h"
#include "seedd/weights.h"

#ifndef SEEDD_C_VERSION
#define SEEDD_C_VERSION "0.0.0"
#endif

struct seedd_answer {
  std::string text;
};

namespace {

char* Copy(std::string_view text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) return nullptr;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

// `argument`: the error is in the call's own arguments (options, files they
// name, the request), found before any byte went to a peer.
int Fail(const seedd::Status& st, char** error, bool argument = false) {
  if (error != nullptr) {
    seedd::Json e{{"code", std::string(seedd::StatusCodeName(st.code()))},
                  {"message", st.ToString()},
                  {"detail", st.message()}};
    if (argument) e["argument"] = true;
    *error = Copy(seedd::DumpJson(e));
  }
  return static_cast<int>(st.code());
}

int FailArgument(const seedd::Status& st, char** error) { return Fail(st, error, true); }

int Invalid(std::string message, char** error) {
  return FailArgument(seedd::Status::InvalidArgument(std::move(message)), error);
}

// The fields of an options object, each checked for its type; the first
// mismatch is kept in `status` and every later read returns the default.
class Fields {
 public:
  explicit Fields(const char* text) {
    if (text == nullptr) {
      status = seedd::Status::InvalidArgument("no options given");
      return;
    }
    seedd::Result<seedd::Json> parsed = seedd::ParseJson(text);
    if (!parsed.ok()) {
      status = parsed.status();
    } else if (!parsed->is_object()) {
      status = seedd::Status::InvalidArgument("the options are a JSON object");
    } else {
      json_ = std::move(*parsed);
    }
  }
  seedd::Status status;

  std::string Text(const char* name) {
    const seedd::Json* v = Find(name);
    if (v == nullptr) return {};
    if (!v->is_string()) return Bad<std::string>(name, "a string");
    return v->get<std::string>();
  }
  bool Bool(const char* name, bool fallback) {
    const seedd::Json* v = Find(name);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Bad<bool>(name, "true or false");
    return v->get<bool>();
  }
  uint64_t Count(const char* name, uint64_t fallback, uint64_t max) {
    const seedd::Json* v = Find(name);
    if (v == nullptr) return fallback;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
      return Bad<uint64_t>(name, "a whole number at least 0");
    }
    const uint64_t n = v->get<uint64_t>();
    if (n > max) return Bad<uint64_t>(name, "at most " + std::to_string(max));
    return n;
  }
  // Seconds as a deadline: finite, between 0 and one year (at least 1 ms).
  std::chrono::milliseconds Seconds(const char* name, double fallback) {
    const seedd::Json* v = Find(name);
    double s = fallback;
    if (v != nullptr) {
      if (!v->is_number()) return Bad<std::chrono::milliseconds>(name, "a number of seconds");
      s = v->get<double>();
    }
    if (!std::isfinite(s) || s < 0 || s > 365.0 * 24 * 3600) {
      return Bad<std::chrono::milliseconds>(
          name, "a finite number of seconds between 0 and one year, not " + std::to_string(s));
    }
    return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.001, s) * 1000));
  }
  std::vector<std::string> Texts(const char* name) {
    const seedd::Json* v = Find(name);
    std::vector<std::string> out;
    if (v == nullptr) return out;
    if (!v->is_array() || v->size() > 4096) return Bad<std::vector<std::string>>(name, "a list");
    for (const seedd::Json& e : *v) {
      if (!e.is_string()) return Bad<std::vector<std::string>>(name, "a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::optional<seedd::HostPort> Address(const char* name) {
    const seedd::Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array() || v->size() < 2 || !(*v)[0].is_string() || !(*v)[1].is_number_integer()) {
      return Bad<std::optional<seedd::HostPort>>(name, "(host, port)");
    }
    const int64_t port = (*v)[1].get<int64_t>();
    if (port < 0 || port > 65535) {
      return Bad<std::optional<seedd::HostPort>>(name, "a port in 0-65535");
    }
    return seedd::HostPort{(*v)[0].get<std::string>(), static_cast<uint16_t>(port)};
  }

 private:
  const seedd::Json* Find(const char* name) const {
    if (!status.ok()) return nullptr;
    auto it = json_.find(name);
    if (it == json_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  template <typename T>
  T Bad(const char* name, const std::string& what) {
    if (status.ok())
      status = seedd::Status::InvalidArgument(std::string(name) + " must be " + what);
    return T{};
  }
  seedd::Json json_ = seedd::Json::object();
};

// A TLS context from PEM files (empty: none).
seedd::Result<std::shared_ptr<seedd::TlsContext>> TlsOf(const std::string& ca,
                                                        const std::string& cert,
                                                        const std::string& key) {
  if (ca.empty() && cert.empty() && key.empty()) return std::shared_ptr<seedd::TlsContext>();
  seedd::TlsOptions o;
  o.ca = ca;
  o.cert = cert;
  o.key = key;
  seedd::Result<std::shared_ptr<seedd::TlsContext>> ctx = seedd::TlsContext::Create(o);
  if (!ctx.ok()) return seedd::Status::InvalidArgument("TLS: " + ctx.status().message());
  return ctx;
}

// A seedable whose resolve is the caller's function; adopting stays with the
// caller (only the source side runs here).
class ForeignSeedable final : public seedd::Seedable {
 public:
  ForeignSeedable(std::string kind, seedd_resolve_fn fn, void* user)
      : kind_(std::move(kind)), fn_(fn), user_(user) {}
  std::string_view kind() const override { return kind_; }
  seedd::Result<seedd::Json> RequestParams(const seedd::Json&) const override {
    return seedd::Status::Internal("adopting runs in the caller");
  }
  seedd::Result<std::optional<seedd::Json>> Resolve(const seedd::Json& request) const override {
    seedd_answer answer;
    const std::string text = seedd::DumpJson(request);
    const int rc = fn_(user_, kind_.c_str(), text.c_str(), &answer);
    switch (rc) {
      case 0: {
        seedd::Result<seedd::Json> payload = seedd::ParseJson(answer.text);
        if (!payload.ok()) return seedd::Status::InvalidArgument(payload.status().message());
        return std::optional<seedd::Json>(std::move(*payload));
      }
      case 1:
        return std::optional<seedd::Json>();
      case 2:
        return seedd::Status::InvalidArgument(answer.text);
      default:
        return seedd::Status::Internal(answer.text);
    }
  }
  seedd::Result<seedd::Json> ValidatePayload(const seedd::Json&) const override {
    return seedd::Status::Internal("adopting runs in the caller");
  }
  seedd::Status Install(const seedd::Json&, const seedd::Json&) override {
    return seedd::Status::Internal("adopting runs in the caller");
  }

 private:
  const std::string kind_;
  const seedd_resolve_fn fn_;
  void* const user_;
};

// Log lines to the caller's function.
class ForeignSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ForeignSink(seedd_log_fn fn) : fn_(fn) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    fn_(static_cast<int>(msg.level), text.c_str());
  }
  void flush_() override {}

 private:
  const seedd_log_fn fn_;
};

seedd::Mutex log_mu;
std::shared_ptr<spdlog::sinks::sink> log_sink GUARDED_BY(log_mu);

seedd::Json StatsOf(const seedd::PullResult& r) {
  const seedd::FetchStats& s = r.stats;
  seedd::Json used = seedd::Json::array();
  for (const seedd::SourceUse& u : s.used) {
    used.push_back({{"name", u.name}, {"seed", u.seed}, {"bytes", u.bytes}});
  }
  return {{"model", r.manifest.model},
          {"root_digest", r.manifest.root_digest},
          {"total_bytes", r.manifest.total_size},
          {"seconds", r.seconds},
          {"up_to_date", s.up_to_date},
          {"bytes_received", s.bytes_received},
          {"bytes_from_peers", s.bytes_from_peers},
          {"bytes_across_zones", s.bytes_across_zones},
          {"bytes_resumed", s.bytes_resumed},
          {"chunks_rejected", s.chunks_rejected},
          {"chunks_resumed", s.chunks_resumed},
          {"chunks_holes", s.chunks_holes},
          {"chunks_reused", s.chunks_reused},
          {"bytes_reused", s.bytes_reused},
          {"requests", s.requests},
          {"sources_dropped", s.sources_dropped},
          {"peers", s.peers},
          {"used", std::move(used)}};
}

}  // namespace

struct seedd_server {
  std::unique_ptr<seedd::SeedTransport> transport;
};

struct seedd_pull {
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  seedd::Mutex mu;
  std::condition_variable cv;
  std::optional<seedd::PullProgress> latest GUARDED_BY(mu);
  bool done GUARDED_BY(mu) = false;
  // The result's JSON (StatsOf a pull from daemons, OriginPullJson one from an upstream).
  seedd::Result<seedd::Json> result GUARDED_BY(mu) = seedd::Status::Internal("not run");
  std::thread worker;
};

namespace {

// seedd_pull_start with "from": the model fetched from its upstream into `into`.
int StartOriginPull(const std::string& from, const std::string& into, const seedd::PullOptions& o,
                    seedd_pull** out, char** error) {
  if (seedd::Status form = seedd::CheckOriginUrl(from); !form.ok()) {
    return FailArgument(form, error);
  }
  if (into.empty()) return Invalid("into is empty: name the directory to pull into", error);
  auto* pull = new seedd_pull();
  seedd::OriginPullOptions po;
  po.access = o.upstream_access;
  po.replace = o.replace;
  po.reuse_from = o.reuse_from;
  po.cancel = pull->cancel;
  po.progress = [pull](uint64_t done, uint64_t total) {
    seedd::MutexLock lock(pull->mu);
    seedd::PullProgress p;
    p.verified_bytes = done;
    p.total_bytes = total;
    p.sources = 1;
    pull->latest = std::move(p);
  };
  pull->worker = std::thread([pull, from, into, po = std::move(po)] {
    seedd::Result<seedd::OriginCopy> r = seedd::PullFromOrigin(from, into, po);
    seedd::MutexLock lock(pull->mu);
    if (r.ok()) {
      pull->result = seedd::OriginPullJson(from, *r);
    } else {
      pull->result = r.status();
    }
    pull->done = true;
    pull->cv.notify_all();
  });
  *out = pull;
  return 0;
}

}  // namespace

extern "C" {

const char* seedd_version(void) { return SEEDD_C_VERSION; }

void seedd_free(char* text) { std::free(text); }

int seedd_set_log_level(const char* level, char** error) {
  if (level == nullptr || !seedd::SetLogLevel(level)) {
    return Invalid(std::string("unknown log level ") + (level ? level : "(none)") +
                       " (trace, debug, info, warn, error, critical, off)",
                   error);
  }
  return 0;
}

void seedd_set_log_handler(seedd_log_fn handler) {
  seedd::MutexLock lock(log_mu);
  spdlog::logger& logger = seedd::Logger();
  if (log_sink) {
    seedd::RemoveLogSink(log_sink);
    log_sink.reset();
  }
  // The logger's first sink is stderr (seedd/logging.h): silent while the
  // caller's function takes the lines.
  logger.sinks().front()->set_level(handler ? spdlog::level::off : spdlog::level::trace);
  if (handler) {
    log_sink = std::make_shared<ForeignSink>(handler);
    seedd::AddLogSink(log_sink);
  }
}

void seedd_answer_set(seedd_answer* out, const char* text, size_t size) {
  if (out != nullptr) out->text.assign(text ? text : "", text ? size : 0);
}

int seedd_server_create(const char* options, seedd_resolve_fn resolve, void* user,
                        seedd_server** out, char** error) {
  if (out == nullptr || resolve == nullptr) return Invalid("no resolve function given", error);
  Fields f(options);
  std::vector<std::string> kinds = f.Texts("kinds");
  std::optional<seedd::HostPort> listen = f.Address("listen");
  seedd::SeedConfig config;
  config.token = f.Text("token");
  seedd::TransportOptions t;
  t.max_connections = f.Count("max_connections", 1024, 1 << 20);
  t.max_resolver_threads = std::max<size_t>(f.Count("max_resolver_threads", 64, 4096), 1);
  t.min_resolver_threads = std::min<size_t>(2, t.max_resolver_threads);
  const std::string cert = f.Text("tls_cert"), key = f.Text("tls_key"), ca = f.Text("tls_ca");
  if (!f.status.ok()) return Fail(f.status, error);
  if (!listen) return Invalid("listen must be (host, port)", error);
  config.listen = *listen;
  if (!cert.empty() || !key.empty()) {
    if (cert.empty() || key.empty())
      return Invalid("a TLS listener needs tls_cert and tls_key", error);
    seedd::Result<std::shared_ptr<seedd::TlsContext>> tls = TlsOf(ca, cert, key);
    if (!tls.ok()) return Fail(tls.status(), error);
    t.tls = std::move(*tls);
  }
  std::vector<seedd::SeedablePtr> seedables;
  std::vector<std::string> seen;
  for (std::string& kind : kinds) {
    // As the reference, the first seedable of a kind is served.
    if (std::find(seen.begin(), seen.end(), kind) != seen.end()) continue;
    seen.push_back(kind);
    seedables.push_back(std::make_shared<ForeignSeedable>(std::move(kind), resolve, user));
  }
  seedd::Result<std::unique_ptr<seedd::SeedTransport>> transport =
      seedd::SeedTransport::Create(std::move(seedables), config, t);
  if (!transport.ok()) return Fail(transport.status(), error);
  *out = new seedd_server{std::move(*transport)};
  return 0;
}

int seedd_server_start(seedd_server* server, char** address, char** error) {
  if (server == nullptr) return Invalid("no server", error);
  seedd::Result<std::optional<seedd::HostPort>> bound = server->transport->StartListener();
  if (!bound.ok()) return Fail(bound.status(), error);
  if (!*bound) return Invalid("no listener configured", error);
  if (address != nullptr) {
    *address = Copy(seedd::DumpJson(seedd::Json::array({(*bound)->host, (*bound)->port})));
  }
  return 0;
}

void seedd_server_close(seedd_server* server) {
  if (server != nullptr) server->transport->Close();
}

size_t seedd_server_open_connections(const seedd_server* server) {
  return server == nullptr ? 0 : server->transport->open_connections();
}

void seedd_server_destroy(seedd_server* server) { delete server; }

int seedd_exchange(const char* options, const char* request, char** response, char** error) {
  Fields f(options);
  seedd::HostPort peer{f.Text("host"), static_cast<uint16_t>(f.Count("port", 0, 65535))};
  seedd::ExchangeOptions o;
  o.connect_timeout = f.Seconds("connect_timeout", 5.0);
  o.response_timeout = f.Seconds("response_timeout", 300.0);
  o.first_byte_timeout = o.response_timeout;
  const std::string ca = f.Text("tls_ca"), cert = f.Text("tls_cert"), key = f.Text("tls_key");
  if (!f.status.ok()) return FailArgument(f.status, error);
  if (!cert.empty() && ca.empty()) {
    return Invalid("a TLS client certificate needs tls_ca (the CA of the daemons)", error);
  }
  seedd::Result<std::shared_ptr<seedd::TlsContext>> tls = TlsOf(ca, cert, key);
  if (!tls.ok()) return FailArgument(tls.status(), error);
  o.tls = std::move(*tls);
  seedd::Result<seedd::Json> json = seedd::ParseJson(request ? request : "");
  if (!json.ok()) return FailArgument(json.status(), error);
  seedd::Result<seedd::Json> answer = seedd::ExchangeJson(peer, *json, o);
  if (!answer.ok()) return Fail(answer.status(), error);
  if (response != nullptr) *response = Copy(seedd::DumpJson(*answer));
  return 0;
}

int seedd_pull_start(const char* options, seedd_pull** out, char** error) {
  if (out == nullptr) return Invalid("no place for the pull", error);
  Fields f(options);
  const std::string model = f.Text("model");
  const std::string into = f.Text("into");
  seedd::PullOptions o;
  o.sources = f.Texts("sources");
  o.token = f.Text("token");
  o.root_digest = f.Text("root_digest");
  o.timeout = f.Seconds("timeout", 1800.0);
  o.replace = f.Bool("replace", false);
  o.verify_sha256 = f.Bool("verify_sha256", false);
  o.order = f.Text("order");
  o.upstream = f.Text("verify_upstream");
  o.upstream_access.auth_file = f.Text("origin_auth");
  o.upstream_access.ca_file = f.Text("origin_ca");
  o.connections = static_cast<int>(f.Count("connections", 4, 64));
  o.max_neighbours = f.Count("max_neighbours", 16, 1024);
  for (const std::string& dir : f.Texts("reuse_from")) o.reuse_from.emplace_back(dir);
  const std::string ca = f.Text("tls_ca"), cert = f.Text("tls_cert"), key = f.Text("tls_key");
  const std::vector<std::string> trust = f.Texts("trust_keys");
  const std::string from = f.Text("from");
  if (!f.status.ok()) return FailArgument(f.status, error);
  if (!from.empty()) {
    if (!model.empty() || !o.sources.empty()) {
      return Invalid("from names where the model lives: give no model or sources with it", error);
    }
    return StartOriginPull(from, into, o, out, error);
  }
  if (!trust.empty()) {
    seedd::Result<std::shared_ptr<const seedd::TrustedKeys>> keys =
        seedd::TrustedKeys::Load({trust.begin(), trust.end()});
    if (!keys.ok()) return Invalid("trust_keys: " + keys.status().message(), error);
    o.trust = std::move(*keys);
  }
  if (!cert.empty() && ca.empty()) {
    return Invalid("a TLS client certificate needs tls_ca (the CA of the daemons)", error);
  }
  seedd::Result<std::shared_ptr<seedd::TlsContext>> tls = TlsOf(ca, cert, key);
  if (!tls.ok()) return FailArgument(tls.status(), error);
  o.tls = std::move(*tls);
  auto* pull = new seedd_pull();
  o.cancel = pull->cancel;
  o.progress = [pull](const seedd::PullProgress& p) {
    seedd::MutexLock lock(pull->mu);
    // Files ready are kept until taken; the counts are the latest.
    std::vector<std::string> ready;
    if (pull->latest) ready = std::move(pull->latest->files_ready);
    ready.insert(ready.end(), p.files_ready.begin(), p.files_ready.end());
    pull->latest = p;
    pull->latest->files_ready = std::move(ready);
  };
  pull->worker = std::thread([pull, model, into, o = std::move(o)] {
    seedd::Result<seedd::PullResult> r = seedd::PullModel(model, into, o);
    seedd::MutexLock lock(pull->mu);
    if (r.ok()) {
      pull->result = StatsOf(*r);
    } else {
      pull->result = r.status();
    }
    pull->done = true;
    pull->cv.notify_all();
  });
  *out = pull;
  return 0;
}

int seedd_pull_wait(seedd_pull* pull, int timeout_ms) {
  if (pull == nullptr) return 1;
  seedd::MutexLock lock(pull->mu);
  pull->cv.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                    [&]() REQUIRES(pull->mu) { return pull->done; });
  return pull->done ? 1 : 0;
}

int seedd_pull_progress(seedd_pull* pull, char** progress) {
  if (pull == nullptr) return 0;
  std::optional<seedd::PullProgress> p;
  {
    seedd::MutexLock lock(pull->mu);
    p = std::move(pull->latest);
    pull->latest.reset();
  }
  if (!p) return 0;
  if (progress != nullptr) {
    *progress = Copy(seedd::DumpJson(seedd::Json{{"verified_bytes", p->verified_bytes},
                                                 {"total_bytes", p->total_bytes},
                                                 {"resumed_bytes", p->resumed_bytes},
                                                 {"sources", p->sources},
                                                 {"files_ready", p->files_ready},
                                                 {"staging", p->staging.string()}}));
  }
  return 1;
}

void seedd_pull_cancel(seedd_pull* pull) {
  if (pull != nullptr) pull->cancel->store(true);
}

int seedd_pull_result(seedd_pull* pull, char** result, char** error) {
  if (pull == nullptr) return Invalid("no pull", error);
  seedd::MutexLock lock(pull->mu);
  if (!pull->done)
    return Fail(seedd::Status::FailedPrecondition("the pull is still running"), error);
  if (!pull->result.ok()) return Fail(pull->result.status(), error);
  if (result != nullptr) *result = Copy(seedd::DumpJson(*pull->result));
  return 0;
}

void seedd_pull_destroy(seedd_pull* pull) {
  if (pull == nullptr) return;
  pull->cancel->store(true);
  if (pull->worker.joinable()) pull->worker.join();
  delete pull;
}

int seedd_build_manifest(const char* options, char** manifest, char** error) {
  Fields f(options);
  const std::string model = f.Text("model");
  const std::string dir = f.Text("dir");
  seedd::BuildOptions o;
  o.chunk_size = f.Count("chunk_size", 0, uint64_t{1} << 40);
  o.sources = f.Texts("sources");
  if (!f.status.ok()) return Fail(f.status, error);
  seedd::Result<seedd::Manifest> m = seedd::BuildManifest(model, dir, o);
  if (!m.ok()) return Fail(m.status(), error);
  if (manifest != nullptr) *manifest = Copy(seedd::DumpJson(m->ToJson()));
  return 0;
}

int seedd_parse_manifest(const char* text, char** manifest, char** error) {
  seedd::Result<seedd::Json> json = seedd::ParseJson(text ? text : "");
  if (!json.ok()) return Fail(json.status(), error);
  seedd::Result<seedd::Manifest> m = seedd::ParseManifest(*json);
  if (!m.ok()) return Fail(m.status(), error);
  if (manifest != nullptr) *manifest = Copy(seedd::DumpJson(m->ToJson()));
  return 0;
}

}  // extern "C"
