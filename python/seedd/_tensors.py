"""load_safetensors: tensors while the bytes land. A pull runs on the
library's thread; each safetensors file is read as soon as the pull reports
it whole and verified, its tensors mapped from the file (no copy) with dtype
and shape from its header, checked against the file before use."""

from __future__ import annotations

import json
import math
import mmap
import os
from typing import Any, Iterator

from . import _native
from ._api import Address, Error, PullStats, _pull_options

# The safetensors dtypes torch can hold, by name: (torch attribute, bytes).
_DTYPES = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
}
_MAX_HEADER = 100 << 20  # as the safetensors format's own readers


def _bad(path: str, why: str) -> Error:
    return Error("%s: not a valid safetensors file: %s" % (path, why), "DataLoss")


def tensors_of(path: str) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of one safetensors file, in the order of their bytes,
    each a view of a private mapping of the file (copy on write: nothing is
    read until used, and writing to a tensor never changes the file)."""
    import torch

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise _bad(path, "%d bytes, shorter than its header's length" % size)
        n = int.from_bytes(f.read(8), "little")
        if n > min(size - 8, _MAX_HEADER):
            raise _bad(path, "a header of %d bytes in a file of %d" % (n, size))
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise _bad(path, "its header is not JSON (%s)" % e) from None
        if not isinstance(header, dict):
            raise _bad(path, "its header is not a JSON object")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size > 0 else None
    base, room = 8 + n, size - 8 - n
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise _bad(path, "tensor %r is not an object" % name)
        kind, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if kind not in _DTYPES:
            raise _bad(path, "tensor %r has dtype %r, which is not one of %s"
                       % (name, kind, ", ".join(_DTYPES)))
        attr, width = _DTYPES[kind]
        dtype = getattr(torch, attr, None)
        if dtype is None:
            raise Error("%s: tensor %r is %s, which this torch (%s) cannot hold"
                        % (path, name, kind, torch.__version__), "FailedPrecondition")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise _bad(path, "tensor %r has shape %r" % (name, shape))
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= room):
            raise _bad(path, "tensor %r has data_offsets %r outside the %d bytes of data"
                       % (name, offsets, room))
        numel = math.prod(shape)
        if numel * width != offsets[1] - offsets[0]:
            raise _bad(path, "tensor %r: %s %s is %d bytes, its data_offsets span %d"
                       % (name, kind, shape, numel * width, offsets[1] - offsets[0]))
        entries.append((offsets[0], name, dtype, shape, numel))
    entries.sort(key=lambda e: e[0])
    for begin, name, dtype, shape, numel in entries:
        if numel == 0:
            yield name, torch.empty(shape, dtype=dtype)
            continue
        yield name, torch.frombuffer(mapped, dtype=dtype, count=numel,
                                     offset=base + begin).reshape(shape)


class TensorStream:
    """What :func:`load_safetensors` returns: iterate it for ``(name,
    tensor)``. Afterwards ``stats`` holds the pull's :class:`PullStats` and
    ``files`` the safetensors files in the order they were read, each with
    whether it was read before the pull ended (``True``: while other files
    were still arriving)."""

    def __init__(self, options: dict[str, Any]):
        self._options = options
        self.stats: PullStats | None = None
        self.files: list[tuple[str, bool]] = []

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        into = self._options["into"]
        done: set[str] = set()
        steps = _native.pull_steps(self._options)
        try:
            while True:
                try:
                    progress = next(steps)
                except StopIteration as end:
                    self.stats = PullStats(**end.value)
                    break
                staging = progress.get("staging", "")
                for rel in progress.get("files_ready", []):
                    if not rel.endswith(".safetensors") or rel in done:
                        continue
                    done.add(rel)
                    # Under staging until the pull commits, then under `into`
                    # (a rename: a mapping made before stays valid).
                    path = os.path.join(staging, rel)
                    for attempt in (path, os.path.join(into, rel), path):
                        try:
                            source = tensors_of(attempt)
                            first = next(source, None)
                            break
                        except FileNotFoundError:
                            continue
                    else:
                        raise Error("%s: ready but found neither in %s nor in %s"
                                    % (rel, staging, into), "IoError")
                    self.files.append((rel, True))
                    if first is not None:
                        yield first
                        yield from source
        except _native.NativeError as e:
            if e.argument:
                raise ValueError(e.detail) from None
            raise Error(e.message, e.code) from None
        finally:
            steps.close()
        # Up to date already, or whole before it was looked at: from `into`.
        rest = []
        for top, dirs, names in os.walk(into):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".seedd"))
            rest += [os.path.relpath(os.path.join(top, n), into)
                     for n in sorted(names) if n.endswith(".safetensors")]
        for rel in rest:
            if rel in done:
                continue
            done.add(rel)
            self.files.append((rel, False))
            yield from tensors_of(os.path.join(into, rel))


def load_safetensors(
    model: str,
    sources: Address | Any,
    into: str | os.PathLike[str],
    token: str | None = None,
    *,
    order: str = "index",
    **pull_options: Any,
) -> TensorStream:
    """Pull ``model`` into ``into`` (as :func:`pull`, with the same options)
    and yield ``(name, torch.Tensor)`` from its safetensors files as each
    file is whole and verified, while the rest of the model is still
    arriving: files complete in the model's order (``order="index"``, the
    default), so a loader that walks its checkpoint in order starts on the
    first shard while the last is on the wire. Each tensor is a view of a
    private mapping of its file (no copy; dtype and shape from the file's
    header, checked against the file's size first). Files whole before the
    call (an up-to-date ``into``) are read after the pull returns.
    Raises :class:`Error` as :func:`pull` does, with code ``DataLoss`` for a
    file that is not valid safetensors. Stopping the iteration stops the pull
    (what it verified is kept for a rerun). Needs torch."""
    options = _pull_options(model, sources, into, token, order=order, **pull_options)
    return TensorStream(options)
