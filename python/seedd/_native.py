"""libseedd_c (the C API of libseedd, include/seedd/seedd_c.h) through ctypes.

One build of the library serves every CPython: nothing here depends on the
interpreter's ABI. Values cross as JSON text. A call into the library releases
the GIL (ctypes does); a callback from the library's threads (a seedable's
resolve, a log line) takes it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
from typing import Any, Callable, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = os.path.join(_HERE, "libseedd_c.so")

try:
    _lib = ctypes.CDLL(_LIBRARY)
except OSError as e:  # pragma: no cover - a broken install
    raise ImportError(
        f"seedd cannot load its library {_LIBRARY}: {e}. The package is built for Linux "
        "x86_64 with OpenSSL 3 (Debian 12 or newer); reinstall it from its wheel (make wheel)."
    ) from e

_out = ctypes.POINTER(ctypes.c_void_p)

_lib.seedd_version.restype = ctypes.c_char_p
_lib.seedd_version.argtypes = []
_lib.seedd_free.restype = None
_lib.seedd_free.argtypes = [ctypes.c_void_p]
_lib.seedd_set_log_level.restype = ctypes.c_int
_lib.seedd_set_log_level.argtypes = [ctypes.c_char_p, _out]

LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)
_lib.seedd_set_log_handler.restype = None
_lib.seedd_set_log_handler.argtypes = [LOG_FN]

RESOLVE_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p
)
_lib.seedd_answer_set.restype = None
_lib.seedd_answer_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_lib.seedd_server_create.restype = ctypes.c_int
_lib.seedd_server_create.argtypes = [ctypes.c_char_p, RESOLVE_FN, ctypes.c_void_p, _out, _out]
_lib.seedd_server_start.restype = ctypes.c_int
_lib.seedd_server_start.argtypes = [ctypes.c_void_p, _out, _out]
_lib.seedd_server_close.restype = None
_lib.seedd_server_close.argtypes = [ctypes.c_void_p]
_lib.seedd_server_open_connections.restype = ctypes.c_size_t
_lib.seedd_server_open_connections.argtypes = [ctypes.c_void_p]
_lib.seedd_server_destroy.restype = None
_lib.seedd_server_destroy.argtypes = [ctypes.c_void_p]
_lib.seedd_exchange.restype = ctypes.c_int
_lib.seedd_exchange.argtypes = [ctypes.c_char_p, ctypes.c_char_p, _out, _out]
_lib.seedd_pull_start.restype = ctypes.c_int
_lib.seedd_pull_start.argtypes = [ctypes.c_char_p, _out, _out]
_lib.seedd_pull_wait.restype = ctypes.c_int
_lib.seedd_pull_wait.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.seedd_pull_progress.restype = ctypes.c_int
_lib.seedd_pull_progress.argtypes = [ctypes.c_void_p, _out]
_lib.seedd_pull_cancel.restype = None
_lib.seedd_pull_cancel.argtypes = [ctypes.c_void_p]
_lib.seedd_pull_result.restype = ctypes.c_int
_lib.seedd_pull_result.argtypes = [ctypes.c_void_p, _out, _out]
_lib.seedd_pull_destroy.restype = None
_lib.seedd_pull_destroy.argtypes = [ctypes.c_void_p]
_lib.seedd_build_manifest.restype = ctypes.c_int
_lib.seedd_build_manifest.argtypes = [ctypes.c_char_p, _out, _out]
_lib.seedd_parse_manifest.restype = ctypes.c_int
_lib.seedd_parse_manifest.argtypes = [ctypes.c_char_p, _out, _out]

VERSION = _lib.seedd_version().decode()


class NativeError(Exception):
    """A failure the library reported: ``code`` its status name ("NotFound",
    ...), ``message`` "Code: text", ``detail`` the text alone; ``argument``
    when the call's own arguments were at fault (before any network)."""

    def __init__(self, code: str, message: str, detail: str, argument: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail
        self.argument = argument


def _take(pointer: ctypes.c_void_p) -> str:
    """The text the library handed out, freed."""
    if not pointer.value:
        return ""
    try:
        return ctypes.string_at(pointer.value).decode("utf-8", "replace")
    finally:
        _lib.seedd_free(pointer.value)


def _call(fn: Any, *args: Any) -> Any:
    """fn(*args, &out, &error): the parsed output, or NativeError."""
    out = ctypes.c_void_p()
    error = ctypes.c_void_p()
    rc = fn(*args, ctypes.byref(out), ctypes.byref(error))
    if rc != 0:
        text = _take(error)
        _take(out)
        try:
            e = json.loads(text)
        except ValueError:
            e = {"code": "Internal", "message": text, "detail": text}
        raise NativeError(
            e.get("code", "Internal"),
            e.get("message", ""),
            e.get("detail", ""),
            bool(e.get("argument", False)),
        )
    text = _take(out)
    return json.loads(text) if text else None


def _options(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def seconds(value: Any, name: str) -> float:
    """``value`` as a deadline in seconds, or ValueError naming ``name``."""
    s = float(value)
    if not (0 <= s <= 365.0 * 24 * 3600):  # NaN fails too
        raise ValueError(
            f"{name} must be a finite number of seconds between 0 and one year, not {value}"
        )
    return s


def set_log_level(level: str) -> None:
    try:
        _call(lambda out, err: _lib.seedd_set_log_level(level.encode(), err))
    except NativeError as e:
        raise ValueError(e.detail) from None


# The library's lines go to the "seedd.core" logger of logging (a child of the
# transport's "seedd"): Python's own configuration decides where they land
# (without any, warnings reach stderr).
_logger = logging.getLogger("seedd.core")
_LEVELS = [logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
           logging.CRITICAL]


@LOG_FN
def _log_line(level: int, message: bytes) -> None:
    try:
        _logger.log(_LEVELS[min(max(level, 0), 5)], "%s", message.decode("utf-8", "replace"))
    except Exception:  # a line is never worth an exception in the library's thread
        pass


def attach_logging() -> None:
    _lib.seedd_set_log_handler(_log_line)


def detach_logging() -> None:
    _lib.seedd_set_log_handler(LOG_FN())


class Server:
    """The control-channel listener serving ``seedables`` (objects with
    ``kind`` and ``resolve``), their resolve called on the listener's threads."""

    def __init__(
        self,
        seedables: Sequence[Any],
        listen: tuple,
        token: str,
        max_connections: int = 1024,
        max_resolver_threads: int = 64,
        tls_cert: str = "",
        tls_key: str = "",
        tls_ca: str = "",
    ):
        self._by_kind: dict[str, Any] = {}
        for s in seedables:  # as the reference, the first of a kind serves
            self._by_kind.setdefault(str(s.kind), s)
        self._resolve = RESOLVE_FN(self._resolve_one)  # alive as long as the server
        handle = ctypes.c_void_p()
        try:
            _call(
                lambda out, err: _lib.seedd_server_create(
                    _options(
                        kinds=list(self._by_kind),
                        listen=[listen[0], int(listen[1])],
                        token=token,
                        max_connections=max_connections,
                        max_resolver_threads=max_resolver_threads,
                        tls_cert=tls_cert,
                        tls_key=tls_key,
                        tls_ca=tls_ca,
                    ),
                    self._resolve,
                    None,
                    ctypes.byref(handle),
                    err,
                )
               
            )
        except NativeError as e:
            if e.code == "InvalidArgument":
                raise ValueError(e.detail) from None
            raise OSError(e.message) from None
        self._handle = handle

    def _resolve_one(self, _user: Any, kind: bytes, request: bytes, out: Any) -> int:
        def answer(text: str) -> None:
            data = text.encode("utf-8", "replace")
            _lib.seedd_answer_set(out, data, len(data))

        name = kind.decode("utf-8", "replace")
        try:
            payload = self._by_kind[name].resolve(json.loads(request))
            if payload is None:
                return 1
            answer(json.dumps(payload))
            return 0
        except (OSError, KeyError, TypeError, ValueError) as e:
            # As the reference: these messages go to the peer.
            answer(str(e))
            return 2
        except BaseException as e:  # a bug of the seedable: logged, the peer told so
            _logger.error("the %s seedable's resolve raised %s: %s", name, type(e).__name__, e)
            answer(f"{type(e).__name__}: {e}")
            return 3

    def start(self) -> tuple[str, int]:
        try:
            host, port = _call(_lib.seedd_server_start, self._handle)
        except NativeError as e:  # as the reference's socket.create_server
            raise OSError(e.message) from None
        return host, port

    def close(self) -> None:
        if self._handle:
            _lib.seedd_server_close(self._handle)

    @property
    def open_connections(self) -> int:
        return int(_lib.seedd_server_open_connections(self._handle)) if self._handle else 0

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.seedd_server_destroy(handle)


def exchange(
    source: Sequence[Any],
    request: Any,
    connect_timeout: float = 5.0,
    response_timeout: float = 300.0,
    tls_ca: str = "",
    tls_cert: str = "",
    tls_key: str = "",
) -> Any:
    """One request, one response. OSError on a transport failure, ValueError
    on a bad argument (as the reference's socket calls)."""
    if len(source) < 2:
        raise ValueError("an address is (host, port)")
    port = int(source[1])
    if not 0 <= port <= 65535:
        raise ValueError("port out of range 0-65535")
    options = _options(
        host=str(source[0]),
        port=port,
        connect_timeout=seconds(connect_timeout, "connect_timeout"),
        response_timeout=seconds(response_timeout, "response_timeout"),
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    text = json.dumps(request).encode()
    try:
        return _call(_lib.seedd_exchange, options, text)
    except NativeError as e:
        if e.argument:
            raise ValueError(e.detail) from None
        raise OSError(e.detail) from None


def pull_steps(options: dict[str, Any], step_ms: int = 20) -> Any:
    """A pull on the library's thread, as a generator: yields each progress
    dict as it comes (waiting ``step_ms`` between looks) and returns the
    pull's result. Closing it early stops the pull (its journal is kept)."""
    handle = ctypes.c_void_p()
    _call(lambda out, err: _lib.seedd_pull_start(_options(**options), ctypes.byref(handle), err))
    try:
        while True:
            ended = _lib.seedd_pull_wait(handle, step_ms)
            p = ctypes.c_void_p()
            if _lib.seedd_pull_progress(handle, ctypes.byref(p)):
                yield json.loads(_take(p))
            if ended:
                break
        return _call(_lib.seedd_pull_result, handle)
    finally:
        _lib.seedd_pull_destroy(handle)


def pull(options: dict[str, Any], progress: Callable[[dict[str, int]], None] | None) -> Any:
    """A pull on the library's thread; this one waits in steps of 50 ms,
    calling ``progress`` and letting Python run its signal handlers: an
    exception (KeyboardInterrupt) cancels the pull, waits for it and is raised."""
    handle = ctypes.c_void_p()
    _call(lambda out, err: _lib.seedd_pull_start(_options(**options), ctypes.byref(handle), err))
    try:
        while True:
            ended = _lib.seedd_pull_wait(handle, 50)
            if progress is not None:
                p = ctypes.c_void_p()
                if _lib.seedd_pull_progress(handle, ctypes.byref(p)):
                    progress(json.loads(_take(p)))
            if ended:
                break
        return _call(_lib.seedd_pull_result, handle)
    finally:
        _lib.seedd_pull_destroy(handle)


def build_manifest(model: str, directory: str, chunk_size: int, sources: list[str]) -> Any:
    return _call(
        _lib.seedd_build_manifest,
        _options(model=model, dir=directory, chunk_size=chunk_size, sources=sources),
    )


def parse_manifest(data: Any) -> Any:
    return _call(_lib.seedd_parse_manifest, json.dumps(data).encode())
