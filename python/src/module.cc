// seedd._seedd: the C++ side of `import seedd` (python/seedd/__init__.py is
// the Python side, with the reference transport's names and behaviour).
//
// What runs here: the control-channel server (seedd::SeedTransport) serving
// Python seedables, the control-channel client, the weights pull and manifests.
// The GIL is released while any of them waits on the network or the disk, and
// taken only to call into Python (a seedable's resolve, a progress callback).
//
// Thread safety: every function may be called from any Python thread.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "seedd/client.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "seedd/seed_transport.h"
#include "seedd/seedable.h"
#include "seedd/weights.h"

namespace py = pybind11;

namespace {

// Python values <-> JSON, as the json module reads and writes them.
py::object ToPy(const seedd::Json& j) {
  switch (j.type()) {
    case seedd::Json::value_t::null:
    case seedd::Json::value_t::discarded:
      return py::none();
    case seedd::Json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case seedd::Json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case seedd::Json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case seedd::Json::value_t::number_float:
      return py::float_(j.get<double>());
    case seedd::Json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case seedd::Json::value_t::array: {
      py::list out(j.size());
      size_t i = 0;
      for (const seedd::Json& v : j) out[i++] = ToPy(v);
      return out;
    }
    case seedd::Json::value_t::object: {
      py::dict out;
      for (auto it = j.begin(); it != j.end(); ++it) out[py::str(it.key())] = ToPy(it.value());
      return out;
    }
    case seedd::Json::value_t::binary:
      break;
  }
  throw py::type_error("a JSON value of an unsupported type");
}

seedd::Json FromPy(py::handle o, int depth = 0);

// A dict key as json.dumps writes it: str as is; int, float, bool and None as
// their JSON text; anything else is a TypeError.
std::string KeyOf(py::handle k) {
  if (py::isinstance<py::str>(k)) return k.cast<std::string>();
  if (k.is_none()) return "null";
  if (py::isinstance<py::bool_>(k)) return k.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(k)) return py::str(k).cast<std::string>();
  if (py::isinstance<py::float_>(k)) return seedd::DumpJson(FromPy(k));
  throw py::type_error("keys must be str, int, float, bool or None, not " +
                       py::str(py::type::handle_of(k).attr("__name__")).cast<std::string>());
}

seedd::Json FromPy(py::handle o, int depth) {
  if (depth > seedd::kMaxJsonDepth) throw py::value_error("JSON nested too deeply");
  if (o.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(o)) return o.cast<bool>();
  if (py::isinstance<py::int_>(o)) {
    // Beyond 64 bits json.dumps writes the digits; nlohmann cannot hold them.
    try {
      return o.cast<int64_t>();
    } catch (const py::cast_error&) {
      return o.cast<uint64_t>();
    }
  }
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  if (py::isinstance<py::dict>(o)) {
    seedd::Json out = seedd::Json::object();
    for (auto item : py::reinterpret_borrow<py::dict>(o)) {
      out[KeyOf(item.first)] = FromPy(item.second, depth + 1);
    }
    return out;
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    seedd::Json out = seedd::Json::array();
    for (py::handle v : o) out.push_back(FromPy(v, depth + 1));
    return out;
  }
  throw py::type_error("Object of type " +
                       py::str(py::type::handle_of(o).attr("__name__")).cast<std::string>() +
                       " is not JSON serializable");
}

// A Python object with the reference's Seedable protocol, served by the C++
// listener: only its `resolve` is called here (adopting runs in Python).
class PySeedable final : public seedd::Seedable {
 public:
  PySeedable(py::object obj, std::string kind) : obj_(std::move(obj)), kind_(std::move(kind)) {}
  ~PySeedable() override {
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }
  std::string_view kind() const override { return kind_; }
  seedd::Result<seedd::Json> RequestParams(const seedd::Json&) const override {
    return seedd::Status::Internal("adopting a Python seedable runs in Python");
  }
  seedd::Result<std::optional<seedd::Json>> Resolve(const seedd::Json& request) const override {
    py::gil_scoped_acquire gil;
    try {
      py::object payload = obj_.attr("resolve")(ToPy(request));
      if (payload.is_none()) return std::optional<seedd::Json>();
      return std::optional<seedd::Json>(FromPy(payload));
    } catch (py::error_already_set& e) {
      // As the reference: the message of OSError, KeyError, TypeError and
      // ValueError goes to the peer. Others are a bug of the seedable: logged
      // with their type, and the peer told so.
      std::string text = py::str(e.value()).cast<std::string>();
      if (e.matches(PyExc_OSError) || e.matches(PyExc_KeyError) || e.matches(PyExc_TypeError) ||
          e.matches(PyExc_ValueError)) {
        return seedd::Status::InvalidArgument(text);
      }
      const std::string type = py::str(e.type().attr("__name__")).cast<std::string>();
      seedd::Logger().error("the {} seedable's resolve raised {}: {}", kind_, type, text);
      return seedd::Status::Internal(type + ": " + text);
    } catch (const std::exception& e) {  // a payload that is not JSON
      return seedd::Status::InvalidArgument(e.what());
    }
  }
  seedd::Result<seedd::Json> ValidatePayload(const seedd::Json&) const override {
    return seedd::Status::Internal("adopting a Python seedable runs in Python");
  }
  seedd::Status Install(const seedd::Json&, const seedd::Json&) override {
    return seedd::Status::Internal("adopting a Python seedable runs in Python");
  }

 private:
  py::object obj_;
  const std::string kind_;
};

// Raises seedd.Error (set by the package at import) carrying the Status text
// and its code's name.
[[noreturn]] void Raise(const seedd::Status& st) {
  py::object error = py::module_::import("seedd").attr("Error");
  py::object e = error(st.ToString(), std::string(seedd::StatusCodeName(st.code())));
  PyErr_SetObject(error.ptr(), e.ptr());
  throw py::error_already_set();
}

seedd::HostPort AddrOf(const py::tuple& addr) {
  if (addr.size() < 2) throw py::value_error("an address is (host, port)");
  seedd::HostPort hp;
  hp.host = addr[0].cast<std::string>();
  const int port = addr[1].cast<int>();
  if (port < 0 || port > 65535) throw py::value_error("port out of range 0-65535");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

// A TLS context from PEM files (paths; empty: none): null when none is given.
// A file that cannot be used raises ValueError naming it and why.
std::shared_ptr<seedd::TlsContext> TlsOf(const std::string& ca, const std::string& cert,
                                         const std::string& key) {
  if (ca.empty() && cert.empty() && key.empty()) return nullptr;
  seedd::TlsOptions o;
  o.ca = ca;
  o.cert = cert;
  o.key = key;
  seedd::Result<std::shared_ptr<seedd::TlsContext>> ctx = seedd::TlsContext::Create(o);
  if (!ctx.ok()) throw py::value_error("TLS: " + ctx.status().message());
  return *ctx;
}

// The listener: a seedd::SeedTransport serving Python seedables.
class Server {
 public:
  Server(const py::list& seedables, const py::tuple& listen, const std::string& token,
         size_t max_connections, size_t max_resolver_threads, const std::string& tls_cert,
         const std::string& tls_key, const std::string& tls_ca) {
    std::vector<seedd::SeedablePtr> kinds;
    std::vector<std::string> seen;
    for (py::handle s : seedables) {
      std::string kind = s.attr("kind").cast<std::string>();
      // The reference serves the first seedable of a kind.
      if (std::find(seen.begin(), seen.end(), kind) != seen.end()) continue;
      seen.push_back(kind);
      kinds.push_back(
          std::make_shared<PySeedable>(py::reinterpret_borrow<py::object>(s), std::move(kind)));
    }
    seedd::SeedConfig config;
    config.listen = AddrOf(listen);
    config.token = token;
    seedd::TransportOptions options;
    options.max_connections = max_connections;
    options.max_resolver_threads = std::max<size_t>(max_resolver_threads, 1);
    options.min_resolver_threads = std::min<size_t>(2, options.max_resolver_threads);
    if (!tls_cert.empty() || !tls_key.empty()) {
      if (tls_cert.empty() || tls_key.empty()) {
        throw py::value_error("a TLS listener needs tls_cert and tls_key");
      }
      options.tls = TlsOf(tls_ca, tls_cert, tls_key);
    }
    seedd::Result<std::unique_ptr<seedd::SeedTransport>> t =
        seedd::SeedTransport::Create(std::move(kinds), config, options);
    if (!t.ok()) Raise(t.status());
    transport_ = std::move(*t);
  }
  ~Server() {
    // Resolver threads take the GIL to call a seedable: stop them without it.
    py::gil_scoped_release nogil;
    transport_.reset();
  }
  py::tuple Start() {
    seedd::Result<std::optional<seedd::HostPort>> bound = [&] {
      py::gil_scoped_release nogil;
      return transport_->StartListener();
    }();
    if (!bound.ok()) {
      // As the reference's socket.create_server: OSError.
      PyErr_SetString(PyExc_OSError, bound.status().ToString().c_str());
      throw py::error_already_set();
    }
    return py::make_tuple((*bound)->host, (*bound)->port);
  }
  void Close() {
    py::gil_scoped_release nogil;
    transport_->Close();
  }
  size_t open_connections() const { return transport_->open_connections(); }

 private:
  std::unique_ptr<seedd::SeedTransport> transport_;
};

// `seconds` as a deadline: a finite number of seconds of at most a year (at
// least 1 ms); anything else (NaN, infinity, a negative) raises ValueError
// naming `what`, instead of a conversion to an integer that is undefined.
std::chrono::milliseconds Deadline(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 365.0 * 24 * 3600) {
    throw py::value_error(std::string(what) +
                          " must be a finite number of seconds between 0 and one year, not " +
                          std::to_string(seconds));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.001, seconds) * 1000));
}

// One request, one response; the GIL released while it travels. Raises
// OSError on a transport failure (as the reference's socket calls would).
py::object Exchange(const py::tuple& source, const py::object& request, double connect_timeout,
                    double response_timeout, const std::string& tls_ca, const std::string& tls_cert,
                    const std::string& tls_key) {
  const seedd::HostPort peer = AddrOf(source);
  seedd::Json json = FromPy(request);
  seedd::ExchangeOptions options;
  options.connect_timeout = Deadline(connect_timeout, "connect_timeout");
  options.response_timeout = Deadline(response_timeout, "response_timeout");
  options.first_byte_timeout = options.response_timeout;
  if (!tls_cert.empty() && tls_ca.empty()) {
    throw py::value_error("a TLS client certificate needs tls_ca (the CA of the daemons)");
  }
  options.tls = TlsOf(tls_ca, tls_cert, tls_key);
  seedd::Result<seedd::Json> response = [&] {
    py::gil_scoped_release nogil;
    return seedd::ExchangeJson(peer, json, options);
  }();
  if (!response.ok()) {
    PyErr_SetString(PyExc_OSError, std::string(response.status().message()).c_str());
    throw py::error_already_set();
  }
  return ToPy(*response);
}

py::dict StatsOf(const seedd::PullResult& r) {
  const seedd::FetchStats& s = r.stats;
  py::list used;
  for (const seedd::SourceUse& u : s.used) {
    py::dict d;
    d["name"] = u.name;
    d["seed"] = u.seed;
    d["bytes"] = u.bytes;
    used.append(d);
  }
  py::dict out;
  out["model"] = r.manifest.model;
  out["root_digest"] = r.manifest.root_digest;
  out["total_bytes"] = r.manifest.total_size;
  out["seconds"] = r.seconds;
  out["up_to_date"] = s.up_to_date;
  out["bytes_received"] = s.bytes_received;
  out["bytes_from_peers"] = s.bytes_from_peers;
  out["bytes_resumed"] = s.bytes_resumed;
  out["chunks_rejected"] = s.chunks_rejected;
  out["chunks_resumed"] = s.chunks_resumed;
  out["chunks_holes"] = s.chunks_holes;
  out["requests"] = s.requests;
  out["sources_dropped"] = s.sources_dropped;
  out["peers"] = s.peers;
  out["used"] = used;
  return out;
}

// PullModel on a thread of its own; this thread waits without the GIL and
// wakes every 50 ms to let Python run its signal handlers (Ctrl-C): an
// exception there cancels the pull, waits for it to stop, and is raised.
py::dict Pull(const std::string& model, const std::vector<std::string>& sources,
              const std::string& into, const std::string& token, const std::string& root_digest,
              double timeout, const py::object& progress, bool replace, bool verify_sha256,
              int connections, size_t max_neighbours, const std::string& tls_ca,
              const std::string& tls_cert, const std::string& tls_key,
              const std::vector<std::string>& trust_keys) {
  seedd::PullOptions o;
  if (!trust_keys.empty()) {
    seedd::Result<std::shared_ptr<const seedd::TrustedKeys>> keys =
        seedd::TrustedKeys::Load({trust_keys.begin(), trust_keys.end()});
    if (!keys.ok()) throw py::value_error("trust_keys: " + keys.status().message());
    o.trust = std::move(*keys);
  }
  o.sources = sources;
  o.token = token;
  o.root_digest = root_digest;
  o.timeout = Deadline(timeout, "timeout");
  if (!tls_cert.empty() && tls_ca.empty()) {
    throw py::value_error("a TLS client certificate needs tls_ca (the CA of the daemons)");
  }
  o.tls = TlsOf(tls_ca, tls_cert, tls_key);
  o.replace = replace;
  o.verify_sha256 = verify_sha256;
  o.connections = connections;
  o.max_neighbours = max_neighbours;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  o.cancel = cancel;
  // Progress goes to Python from this thread (the one holding the interpreter's
  // attention), the latest only: the pull's threads never wait for the GIL.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<seedd::PullProgress> latest;
  bool done = false;
  if (!progress.is_none()) {
    o.progress = [&](const seedd::PullProgress& p) {
      std::lock_guard<std::mutex> lock(mu);
      latest = p;
      cv.notify_all();
    };
  }
  seedd::Result<seedd::PullResult> result = seedd::Status::Internal("not run");
  std::thread worker([&] {
    seedd::Result<seedd::PullResult> r = seedd::PullModel(model, into, o);
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    done = true;
    cv.notify_all();
  });
  auto report = [&](const seedd::PullProgress& p) {
    py::dict d;
    d["verified_bytes"] = p.verified_bytes;
    d["total_bytes"] = p.total_bytes;
    d["resumed_bytes"] = p.resumed_bytes;
    d["sources"] = p.sources;
    progress(d);
  };
  try {
    for (;;) {
      std::optional<seedd::PullProgress> now;
      bool finished;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done || latest; });
        now = std::move(latest);
        latest.reset();
        finished = done;
      }
      if (now) report(*now);
      if (finished) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  } catch (...) {
    cancel->store(true);
    {
      py::gil_scoped_release nogil;
      worker.join();
    }
    throw;
  }
  worker.join();
  if (!result.ok()) Raise(result.status());
  return StatsOf(*result);
}

}  // namespace

PYBIND11_MODULE(_seedd, m) {
  m.doc() = "seedd's C++ core: the control channel, the weights pull and manifests";
  // The daemon's log lines (the listener's refusals, a pull's retries) go to
  // stderr at this level and above: "trace" ... "critical", "off".
  m.def(
      "set_log_level",
      [](const std::string& level) {
        if (!seedd::SetLogLevel(level)) {
          throw py::value_error("unknown log level " + level +
                                " (trace, debug, info, warn, error, critical, off)");
        }
      },
      py::arg("level"));

  py::class_<Server>(m, "Server")
      .def(py::init<const py::list&, const py::tuple&, const std::string&, size_t, size_t,
                    const std::string&, const std::string&, const std::string&>(),
           py::arg("seedables"), py::arg("listen"), py::arg("token"),
           py::arg("max_connections") = 1024, py::arg("max_resolver_threads") = 64,
           py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("tls_ca") = "")
      .def("start", &Server::Start)
      .def("close", &Server::Close)
      .def_property_readonly("open_connections", &Server::open_connections);

  m.def("exchange", &Exchange, py::arg("source"), py::arg("request"),
        py::arg("connect_timeout") = 5.0, py::arg("response_timeout") = 300.0,
        py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "");

  m.def("pull", &Pull, py::arg("model"), py::arg("sources"), py::arg("into"), py::arg("token"),
        py::arg("root_digest") = "", py::arg("timeout") = 1800.0, py::arg("progress") = py::none(),
        py::arg("replace") = false, py::arg("verify_sha256") = false, py::arg("connections") = 4,
        py::arg("max_neighbours") = 16, py::arg("tls_ca") = "", py::arg("tls_cert") = "",
        py::arg("tls_key") = "", py::arg("trust_keys") = std::vector<std::string>());

  m.def(
      "build_manifest",
      [](const std::string& model, const std::string& dir, uint64_t chunk_size,
         const std::vector<std::string>& sources) {
        seedd::BuildOptions o;
        o.chunk_size = chunk_size;
        o.sources = sources;
        seedd::Result<seedd::Manifest> m = [&] {
          py::gil_scoped_release nogil;
          return seedd::BuildManifest(model, dir, o);
        }();
        if (!m.ok()) Raise(m.status());
        return ToPy(m->ToJson());
      },
      py::arg("model"), py::arg("dir"), py::arg("chunk_size") = 0,
      py::arg("sources") = std::vector<std::string>());

  m.def(
      "parse_manifest",
      [](const py::object& json) {
        seedd::Result<seedd::Manifest> m = seedd::ParseManifest(FromPy(json));
        if (!m.ok()) Raise(m.status());
        return ToPy(m->ToJson());
      },
      py::arg("json"));
}
