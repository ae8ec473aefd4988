"""A Python process serving a FlashInfer table with seedd.SeedTransport (or
the reference transport with --reference): prints 'serve_flashinfer: serving
on HOST:PORT' once listening, serves until SIGTERM.

    serve_flashinfer.py ROOT [--reference]      (token: $SEEDD_TOKEN)
"""

import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))

import warmup_cache_ref  # noqa: E402

if "--reference" in sys.argv:
    import reference_seed as impl  # noqa: E402
else:
    import seedd as impl  # noqa: E402

root = sys.argv[1]
transport = impl.SeedTransport(
    [warmup_cache_ref.FlashInferWarmupCache(root)],
    impl.SeedConfig(listen=("127.0.0.1", 0), token=os.environ["SEEDD_TOKEN"]),
)
host, port = transport.start_listener()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print(f"serve_flashinfer: serving on {host}:{port}", flush=True)
stop.wait()
transport.close()
