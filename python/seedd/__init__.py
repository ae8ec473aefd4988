"""seedd: seed an inference engine's warm state from peer daemons.

A drop-in for the reference daemon-to-daemon transport
(``vllm.model_executor.model_loader.weight_cache.seed``): the same
:class:`SeedConfig`, :class:`SeedTransport` and :class:`Seedable`, with the
same methods, return values, exceptions and log lines, so an engine switches by
changing one import::

    from seedd import SeedConfig, SeedTransport

The transport underneath is seedd's C++ one (libseedd_c, loaded with ctypes,
so one build serves every CPython from 3.9): the listener serves connections
concurrently, bounded in number and each within its deadlines (the reference
serves one at a time), and calls a seedable's ``resolve`` holding the GIL only
for that call; a request waits on the network without the GIL.

Beyond the reference: :func:`pull` fetches a model's weights from seedd
daemons (verified, resumable, from several sources), :func:`pull_from` from
where the model lives (an OCI registry, S3) with no daemon, and :class:`Manifest`
builds and reads the manifests that describe them. Their failures raise
:class:`Error`, carrying the daemon's own words.
"""

# Written for every Python that may import it, so that an old one hears why.
import sys as _sys

SUPPORTED = "CPython 3.9 and newer (built and tested for 3.9, 3.10, 3.11, 3.12 and 3.13)"
if _sys.version_info < (3, 9):
    raise ImportError(
        "seedd supports %s; this interpreter is %s %s (%s)"
        % (
            SUPPORTED,
            _sys.implementation.name if hasattr(_sys, "implementation") else "Python",
            _sys.version.split()[0],
            _sys.executable,
        )
    )

from ._api import (  # noqa: E402
    __all__,
    Error,
    Manifest,
    OriginPullStats,
    PullStats,
    SeedConfig,
    Seedable,
    SeedTransport,
    TlsFiles,
    pull,
    pull_from,
    set_log_level,
)
from ._tensors import TensorStream, load_safetensors  # noqa: E402
from ._native import VERSION as __version__  # noqa: E402

# Named as users import them (seedd.Error in a traceback, not seedd._api.Error).
for _public in (Error, Manifest, OriginPullStats, PullStats, SeedConfig, Seedable, SeedTransport,
                TlsFiles, pull, pull_from, set_log_level):
    _public.__module__ = __name__
del _public
