"""The package's Python side: the reference transport's names and behaviour,
the weights pull and manifests, over libseedd_c (_native)."""

from __future__ import annotations

import atexit
import json
import logging
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Protocol, Sequence, Union

from . import _native

__all__ = [
    "Error",
    "Manifest",
    "OriginPullStats",
    "PullStats",
    "SeedConfig",
    "SeedTransport",
    "Seedable",
    "TensorStream",
    "TlsFiles",
    "load_safetensors",
    "pull",
    "pull_from",
    "set_log_level",
]

logger = logging.getLogger("seedd")  # the reference transport's logger name

# A request connects within this and reads the whole response within the
# authenticated deadline (a source may resolve slowly: a large model's manifest).
_CONNECT_TIMEOUT_S = 5.0
_REQUEST_TIMEOUT_S = 300.0


class Error(RuntimeError):
    """A pull or a manifest failed. ``str(e)`` is the daemon's text ("NotFound:
    ..."), ``e.code`` the code's name ("NotFound", "Unavailable", "Cancelled",
    ...)."""

    def __init__(self, message: str, code: str = "Internal"):
        super().__init__(message)
        self.code = code


def _native_call(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), a failure of the library raised as :class:`Error`."""
    try:
        return fn(*args)
    except _native.NativeError as e:
        raise Error(e.message, e.code) from None


class SeedConfig(NamedTuple):
    """One daemon's D2D seeding configuration: its listener, its source
    replica, and the shared token authenticating both."""

    listen: tuple[str, int] | None = None
    source: tuple[str, int] | None = None
    token: str | None = None


class TlsFiles(NamedTuple):
    """TLS for a :class:`SeedTransport` (PEM file paths; the reference's
    SeedConfig has no place for them). With ``cert`` and ``key`` the listener
    speaks TLS 1.3 only; with ``ca`` requests to the source use TLS and verify
    it against that CA, ``cert``/``key`` then serving as a client certificate
    for daemons that require one. By default from the environment:
    ``SEEDD_TLS_CA``, ``SEEDD_TLS_CERT``, ``SEEDD_TLS_KEY``, so that an engine
    using the drop-in transport gets TLS without a change to its code."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def from_environment(cls) -> "TlsFiles":
        return cls(
            os.environ.get("SEEDD_TLS_CA") or None,
            os.environ.get("SEEDD_TLS_CERT") or None,
            os.environ.get("SEEDD_TLS_KEY") or None,
        )


class Seedable(Protocol):
    """One kind of state a daemon can seed to or from a peer daemon."""

    kind: str

    def request_params(self, ctx: Any) -> dict[str, Any]:
        """Target side: the key fields identifying what this rank needs."""
        ...

    def resolve(self, request: dict[str, Any]) -> Any | None:
        """Source side: produce the payload named by ``request``.

        Validate the wire key first: raise on any malformed field
        (``ValueError`` for bad values, ``KeyError`` for missing ones) before
        touching local state; the transport turns it into an error response.
        Return None on a miss. Called from the listener's threads, several at
        once: it must be thread-safe.
        """
        ...

    def validate_payload(self, payload: Any) -> Any:
        """Target side: validate the fetched payload, or raise ValueError."""
        ...

    def install(self, ctx: Any, payload: Any) -> None:
        """Target side: install a validated payload."""
        ...


# Listeners still open when the interpreter exits are closed first: their
# threads call into Python.
_open_servers: "weakref.WeakSet[SeedTransport]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for transport in list(_open_servers):
        transport.close()
    # No line reaches Python once it is shutting down.
    _native.detach_logging()


class SeedTransport:
    """The daemon's D2D seeding endpoint: serves and fetches seedables."""

    def __init__(
        self,
        seedables: Iterable[Seedable],
        seed_config: SeedConfig | None = None,
    ):
        seed_config = seed_config or SeedConfig()
        listen, source, token = seed_config
        self.tls = TlsFiles.from_environment()
        if (listen is not None or source is not None) and not token:
            raise ValueError("A daemon-to-daemon listener/source requires a token")
        self._seedables = list(seedables)
        self._seed_config = seed_config
        self._server: _native.Server | None = None

    def adopt(self, seedable: Seedable, ctx: Any) -> None:
        """Best-effort: fetch and install ``seedable`` from the source daemon.

        Any failure degrades to the local path with a log line.
        """
        response = self.request(
            {"kind": seedable.kind, **seedable.request_params(ctx)},
        )
        if response is None:
            return
        status = response.get("status")
        if status != "ok":
            log = logger.info if status == "miss" else logger.warning
            log(
                "No remote %s seed adopted (status %s); using the local path",
                seedable.kind,
                status,
            )
            return
        try:
            seedable.install(ctx, seedable.validate_payload(response.get("payload")))
        except Exception as e:
            logger.warning(
                "Rejected the remote %s seed; using the local path: %s",
                seedable.kind,
                e,
            )
            return
        logger.info("Adopted remote %s seed", seedable.kind)

    def handle_request(self, request: Any) -> dict[str, Any]:
        """Source side: answer one authenticated seed request."""
        kind_name = request.get("kind") if isinstance(request, dict) else None
        seedable = next((s for s in self._seedables if s.kind == kind_name), None)
        if seedable is None:
            return {"status": "error", "message": "unsupported seed kind"}
        try:
            payload = seedable.resolve(request)
        except (OSError, KeyError, TypeError, ValueError) as e:
            return {"status": "error", "message": str(e)}
        if payload is None:
            return {"status": "miss"}
        return {"status": "ok", "payload": payload}

    def request(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Send one authenticated request to the source daemon.

        Returns the response, or None with a log line on any transport
        failure; the caller falls back to its local path then.
        """
        source = self._seed_config.source
        if source is None:
            return None
        label = payload.get("kind", "payload")
        try:
            response = _native.exchange(
                tuple(source),
                {**payload, "token": self._seed_config.token},
                _CONNECT_TIMEOUT_S,
                _REQUEST_TIMEOUT_S,
                os.fspath(self.tls.ca or ""),
                os.fspath(self.tls.cert or "") if self.tls.ca else "",
                os.fspath(self.tls.key or "") if self.tls.ca else "",
            )
        except (OSError, ValueError) as e:
            logger.warning(
                "Cannot fetch %s from %s over D2D; falling back locally: %s",
                label,
                source,
                e,
            )
            return None
        if not isinstance(response, dict):
            logger.warning(
                "Source %s sent a malformed response for %s; falling back locally",
                source,
                label,
            )
            return None
        return response

    def start_listener(self) -> tuple[str, int] | None:
        """Start serving this rank's seedables to peer daemons.

        Returns the bound address, or None when no listener is configured.
        """
        listen = self._seed_config.listen
        if listen is None:
            return None
        server = _native.Server(
            self._seedables,
            tuple(listen),
            self._seed_config.token,
            tls_cert=os.fspath(self.tls.cert or ""),
            tls_key=os.fspath(self.tls.key or ""),
            tls_ca=os.fspath(self.tls.ca or ""),
        )
        address = server.start()
        self._server = server
        _open_servers.add(self)
        return address

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        _open_servers.discard(self)


def set_log_level(level: str) -> None:
    """The library's own log lines (a listener's refusals of bad peers, a
    pull's retries) at ``level`` and above go to the ``seedd.core`` logger of
    :mod:`logging` (a child of ``seedd``, where the transport's lines go): "trace",
    "debug", "info", "warn" (the default), "error", "critical" or "off".
    Where they land is Python's logging configuration (with none, warnings
    and errors reach stderr; info lines only once both this and logging ask)."""
    _native.set_log_level(level)


_native.set_log_level("warn")
_native.attach_logging()


@dataclass(frozen=True)
class PullStats:
    """What :func:`pull` did."""

    model: str
    root_digest: str
    total_bytes: int
    seconds: float  # the whole call, waits for sources included
    up_to_date: bool  # the destination held this version: nothing moved
    bytes_received: int  # chunk bytes that arrived (rejected ones included)
    bytes_from_peers: int  # of which from relays rather than the sources given
    bytes_resumed: int  # verified by an earlier, interrupted pull
    chunks_rejected: int  # failed verification and were fetched again
    chunks_resumed: int
    chunks_holes: int  # all zeros: not sent, not written
    requests: int
    chunks_reused: int = 0  # copied from files held here (reuse_from), not fetched
    bytes_reused: int = 0
    bytes_across_zones: int = 0  # from sources of another zone (a daemon's --zone)
    sources_dropped: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)  # relays learnt on the way
    used: list[dict[str, Any]] = field(default_factory=list)  # {name, seed, bytes}


Address = Union[str, Sequence[Any]]


def _address_text(source: Address) -> str:
    if isinstance(source, str):
        return source
    host, port = source[0], source[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _pull_options(
    model: str,
    sources: Address | Iterable[Address],
    into: str | os.PathLike[str],
    token: str | None,
    *,
    root_digest: str = "",
    timeout: float = 1800.0,
    replace: bool = False,
    verify_sha256: bool = False,
    connections: int = 4,
    max_neighbours: int = 16,
    tls_ca: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    trust_keys: Iterable[str | os.PathLike[str]] = (),
    reuse_from: Iterable[str | os.PathLike[str]] = (),
    verify_upstream: str = "",
    origin_auth: str | os.PathLike[str] | None = None,
    origin_ca: str | os.PathLike[str] | None = None,
    order: str = "",
) -> dict[str, Any]:
    """The native pull's options from pull()'s arguments, checked."""
    if isinstance(sources, str) or (
        isinstance(sources, tuple) and len(sources) == 2 and isinstance(sources[1], int)
    ):
        sources = [sources]
    texts = [_address_text(s) for s in sources]
    if not texts:
        raise ValueError("pull needs at least one source (HOST:PORT)")
    if token is None:
        token = os.environ.get("SEEDD_TOKEN", "")
    if not token:
        raise ValueError("pull needs the shared token (token=..., or $SEEDD_TOKEN)")
    env_tls = TlsFiles.from_environment()
    keys = [trust_keys] if isinstance(trust_keys, (str, os.PathLike)) else trust_keys
    options = dict(
        model=model,
        sources=texts,
        into=os.fspath(into),
        token=token,
        root_digest=root_digest,
        timeout=_native.seconds(timeout, "timeout"),
        replace=bool(replace),
        verify_sha256=bool(verify_sha256),
        connections=int(connections),
        max_neighbours=int(max_neighbours),
        tls_ca=os.fspath(tls_ca or env_tls.ca or ""),
        tls_cert=os.fspath(tls_cert or env_tls.cert or ""),
        tls_key=os.fspath(tls_key or env_tls.key or ""),
        trust_keys=[os.fspath(k) for k in keys],
        reuse_from=[
            os.fspath(d)
            for d in ([reuse_from] if isinstance(reuse_from, (str, os.PathLike)) else reuse_from)
        ],
        verify_upstream=verify_upstream,
        origin_auth=os.fspath(origin_auth or ""),
        origin_ca=os.fspath(origin_ca or ""),
        order=order,
    )
    if options["tls_cert"] and not options["tls_ca"]:
        raise ValueError("a TLS client certificate needs tls_ca (the CA of the daemons)")
    if order not in ("", "index"):
        raise ValueError("order must be 'index' or '' (rarest first), not %r" % (order,))
    return options


def pull(
    model: str,
    sources: Address | Iterable[Address],
    into: str | os.PathLike[str],
    token: str | None = None,
    *,
    root_digest: str = "",
    timeout: float = 1800.0,
    progress: Callable[[dict[str, int]], None] | None = None,
    replace: bool = False,
    verify_sha256: bool = False,
    connections: int = 4,
    max_neighbours: int = 16,
    tls_ca: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    trust_keys: Iterable[str | os.PathLike[str]] = (),
    reuse_from: Iterable[str | os.PathLike[str]] = (),
    verify_upstream: str = "",
    origin_auth: str | os.PathLike[str] | None = None,
    origin_ca: str | os.PathLike[str] | None = None,
    order: str = "",
) -> PullStats:
    """Pull ``model``'s weights from seedd daemons into the directory ``into``.

    ``sources``: "HOST:PORT" or (host, port), one or several (a name that
    resolves to several addresses counts as that many). ``token``: the shared
    token (default: ``$SEEDD_TOKEN``). ``root_digest`` pins the version: any
    other is refused before a byte moves. Sources that do not answer are tried
    again until ``timeout`` seconds after the call. ``progress`` is called with
    ``{"verified_bytes", "total_bytes", "resumed_bytes", "sources"}`` as chunks
    are verified, on the calling thread. ``tls_ca``: connect with TLS and
    verify the daemons against this CA (PEM); ``tls_cert``/``tls_key``: a
    client certificate for daemons that require one (each by default from
    ``SEEDD_TLS_CA``, ``SEEDD_TLS_CERT``, ``SEEDD_TLS_KEY``). ``trust_keys``:
    Ed25519 public keys (PEM files); only a manifest signed by one of them (the
    publishing daemon's ``--sign-key``) is pulled, anything else raises
    ``FailedPrecondition`` naming the signer's key. ``reuse_from``: directories
    laid out as the model (an earlier version): chunks they hold at the same
    path and offset, checked against the manifest, are copied from there
    instead of fetched (so is ``into`` when ``replace`` swaps it).
    ``verify_upstream``: the model's upstream, ``oci://REGISTRY/REPOSITORY:TAG``
    or ``...@sha256:DIGEST``; the manifest must name exactly its files, each
    with its layer's SHA-256 (else ``FailedPrecondition`` before any byte
    moves), and every file's SHA-256 is checked before commit; or an
    ``s3://BUCKET/PREFIX?...`` whose objects' ETags (MD5s) every file must match
    before commit (``origin_auth``: registry credentials as ``docker login``
    writes them; ``origin_ca``: a CA bundle for an https registry or endpoint). ``order="index"``: files complete one after
    another in the manifest's order (a sharded checkpoint's shards in its
    index's order) when pulling from the sources alone and near the end of a
    swarm pull; ``progress`` then also gets ``files_ready``, the files whole
    and verified since its last call, readable under ``staging`` until the
    pull commits (see :func:`load_safetensors`).

    Every chunk is verified before it lands; the files appear under ``into``
    only once all are (a pull interrupted, by Ctrl-C too, keeps what it
    verified and a rerun resumes). Raises :class:`Error` on failure (``code``:
    "InvalidArgument", "NotFound", "FailedPrecondition", "Unavailable",
    "DeadlineExceeded", "DataLoss", "IoError"); KeyboardInterrupt stops the
    pull within about 50 ms and is raised.
    """
    options = _pull_options(
        model, sources, into, token, root_digest=root_digest, timeout=timeout,
        replace=replace, verify_sha256=verify_sha256, connections=connections,
        max_neighbours=max_neighbours, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
        trust_keys=trust_keys, reuse_from=reuse_from, verify_upstream=verify_upstream,
        origin_auth=origin_auth, origin_ca=origin_ca, order=order
    )
    return PullStats(**_run_pull(options, progress))


def _run_pull(options: dict[str, Any], progress: Callable[[dict[str, int]], None] | None) -> Any:
    """The native pull's result; its failures as ValueError (a bad argument of
    the call, as before any network) or Error."""
    try:
        return _native.pull(options, progress)
    except _native.NativeError as e:
        if e.argument:
            raise ValueError(e.detail) from None
        raise Error(e.message, e.code) from None


@dataclass
class OriginPullStats:
    """What :func:`pull_from` did."""

    source: str  # the URL pulled from
    into: str
    version: str  # what the upstream names this version: an OCI manifest's sha256:...
    files: int
    total_bytes: int
    bytes_fetched: int  # from upstream
    bytes_reused: int  # copied from files with the same digest held here
    files_unverified: int  # with no upstream digest (S3 multipart without a checksum)
    seconds: float


def pull_from(
    url: str,
    into: str | os.PathLike[str],
    *,
    replace: bool = False,
    reuse_from: Iterable[str | os.PathLike[str]] = (),
    origin_auth: str | os.PathLike[str] | None = None,
    origin_ca: str | os.PathLike[str] | None = None,
    progress: Callable[[dict[str, int]], None] | None = None,
) -> OriginPullStats:
    """Fetch the model that ``url`` names from where it lives, with no daemon,
    into the directory ``into``: ``oci://REGISTRY/REPOSITORY:TAG`` (or
    ``...@sha256:DIGEST``, pinned) for a ModelPack or an artifact of titled
    layers, or ``s3://BUCKET/PREFIX?endpoint=...&region=...`` (AWS credentials
    from the environment, as for the S3 store). What ``seedctl pull URL --into
    DIR`` does.

    Every file is checked against its upstream digest (an OCI layer's SHA-256,
    an S3 checksum or MD5 ETag) in a staging directory beside ``into``, then
    moved in: ``into`` is created, or filled if it is an empty directory, or
    with ``replace`` its files are swapped for the model's in one rename; a
    directory holding other files without ``replace`` raises
    ``FailedPrecondition`` before any byte moves. Files held already at the
    same path with the upstream's digest (in ``into`` when ``replace`` swaps
    it, or in the ``reuse_from`` directories, laid out as the model) are
    copied instead of fetched: a new revision moves what changed
    (``bytes_reused`` says how much did not). ``origin_auth``: registry
    credentials as ``docker login`` writes them; ``origin_ca``: a CA bundle for
    an https registry or endpoint. ``progress`` is called with
    ``{"verified_bytes", "total_bytes", "sources"}`` on the calling thread.
    Raises :class:`Error` (``code``: "NotFound" for a missing tag or prefix,
    "Unavailable" for an unreachable upstream, "DataLoss" for a file that does
    not match its digest, ...), nothing moved into ``into``;
    KeyboardInterrupt stops the pull and is raised.
    """
    dirs = [reuse_from] if isinstance(reuse_from, (str, os.PathLike)) else reuse_from
    options: dict[str, Any] = {
        "from": str(url),
        "into": os.fspath(into),
        "replace": bool(replace),
        "reuse_from": [os.fspath(d) for d in dirs],
    }
    if origin_auth is not None:
        options["origin_auth"] = os.fspath(origin_auth)
    if origin_ca is not None:
        options["origin_ca"] = os.fspath(origin_ca)
    stats = _run_pull(options, progress)
    stats["source"] = stats.pop("from")
    return OriginPullStats(**stats)


class Manifest:
    """A model's manifest: its files, chunks and their digests, and the root
    digest that names this version. Built from a directory (as the daemon
    does), or read from JSON (as a daemon serves it); validated either way."""

    def __init__(self, data: dict[str, Any]):
        self._data = _native_call(_native.parse_manifest, data)

    @classmethod
    def build(
        cls,
        model: str,
        directory: str | os.PathLike[str],
        chunk_size: int = 0,
        sources: Iterable[str] = (),
    ) -> "Manifest":
        """Index the model files under ``directory`` (safetensors and the rest).
        ``chunk_size`` 0: about 1,024 chunks, as the daemon's default."""
        built = _native_call(
            _native.build_manifest, model, os.fspath(directory), int(chunk_size), list(sources)
        )
        manifest = cls.__new__(cls)
        manifest._data = built
        return manifest

    @classmethod
    def parse(cls, text: str | bytes | dict[str, Any]) -> "Manifest":
        """Read a manifest from its JSON text (or the parsed object)."""
        if isinstance(text, (str, bytes)):
            text = json.loads(text)
        return cls(text)

    @property
    def model(self) -> str:
        return self._data["model"]

    @property
    def root_digest(self) -> str:
        return self._data["root_digest"]

    @property
    def total_size(self) -> int:
        return self._data["total_size"]

    @property
    def chunk_size(self) -> int:
        return self._data["chunk_size"]

    @property
    def files(self) -> list[dict[str, Any]]:
        return self._data["files"]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return self._data["chunks"]

    @property
    def tensors(self) -> list[dict[str, Any]]:
        return self._data.get("tensors", [])

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON object (its root digest included)."""
        return json.loads(json.dumps(self._data))

    def __repr__(self) -> str:
        return (
            f"Manifest(model={self.model!r}, root_digest={self.root_digest[:12]}..., "
            f"files={len(self.files)}, total_size={self.total_size})"
        )
