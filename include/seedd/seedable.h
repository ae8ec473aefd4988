// Seedable: one kind of state a daemon can seed to or from a peer daemon.
//
// Thread safety: Resolve may be called from several transport threads at once and
// must be thread-safe. RequestParams, ValidatePayload and Install are called by the
// adopting thread; implementations document anything stronger.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

class Seedable {
 public:
  Seedable() = default;
  Seedable(const Seedable&) = delete;
  Seedable& operator=(const Seedable&) = delete;
  virtual ~Seedable() = default;

  // The stable wire name, e.g. "artifact" or "flashinfer_autotune".
  virtual std::string_view kind() const = 0;

  // Target side: the key fields (a JSON object) naming what `ctx` needs.
  // `ctx` is kind-specific; the transport passes it through untouched.
  virtual Result<Json> RequestParams(const Json& ctx) const = 0;

  // Source side: validate the wire key first, before touching local state; a
  // malformed or missing field is an error whose message goes to the peer.
  // Returns the payload, or nullopt on a miss.
  virtual Result<std::optional<Json>> Resolve(const Json& request) const = 0;

  // Source side, what the listener calls: Resolve's payload as JSON text. A kind
  // whose payload is large and handed out often (a manifest) overrides it to
  // serialize once, not per request; the default serializes Resolve's.
  virtual Result<std::optional<std::string>> ResolveText(const Json& request) const;

  // Source side: ResolveText when the answer is at hand without blocking (no
  // network, nothing read that is not in the kernel's caches, a small payload):
  // true with *text set. False when it is not: the listener then calls
  // ResolveText on a resolver thread. The listener calls this on its own thread
  // for requests whole when their connection is accepted, so an implementation
  // must return within microseconds. The default: false.
  virtual bool ResolveTextNow(const Json& request, Result<std::optional<std::string>>* text) const;

  // Target side: check what arrived; returns the payload to install.
  virtual Result<Json> ValidatePayload(const Json& payload) const = 0;

  // Target side: install a payload returned by ValidatePayload.
  virtual Status Install(const Json& ctx, const Json& payload) = 0;
};

using SeedablePtr = std::shared_ptr<Seedable>;

}  // namespace seedd
