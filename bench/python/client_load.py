"""Requests per second of a Python transport's client against a control-channel
server: CLIENTS threads, each calling SeedTransport.request in a loop for
SECONDS (one connection per request, as the protocol is). Prints one line in
control_plane_load's format:

    LABEL rps=... p50_ms=... p99_ms=... errors=...

    client_load.py {seedd|reference} HOST:PORT REQUEST_JSON CLIENTS SECONDS LABEL
(token: $SEEDD_TOKEN; the reference module from tests/python)
"""

import json
import logging
import resource
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tests/python"))

impl_name, target, request_json, clients, seconds, label = sys.argv[1:7]
if impl_name == "seedd":
    import seedd as impl
else:
    import reference_seed as impl

logging.basicConfig(level=logging.ERROR)
host, _, port = target.rpartition(":")
transport = impl.SeedTransport(
    [], impl.SeedConfig(source=(host, int(port)), token=os.environ["SEEDD_TOKEN"]))
request = json.loads(request_json)
deadline = time.monotonic() + 0.3 + float(seconds)  # 0.3 s of warm-up, not counted
start = time.monotonic() + 0.3
latencies = []
errors = [0]
lock = threading.Lock()


def run():
    mine = []
    bad = 0
    while True:
        t0 = time.monotonic()
        if t0 >= deadline:
            break
        r = transport.request(request)
        t1 = time.monotonic()
        if t0 >= start:
            if r is None or r.get("status") != "ok":
                bad += 1
            else:
                mine.append((t1 - t0) * 1000)
    with lock:
        latencies.extend(mine)
        errors[0] += bad


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


threads = [threading.Thread(target=run) for _ in range(int(clients))]
cpu_start = cpu()
for t in threads:
    t.start()
for t in threads:
    t.join()
# CPU per request of this client process (user + system), warm-up included in
# both the time and the requests counted here.
cpu_used = cpu() - cpu_start
latencies.sort()
p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0
total = len(latencies) + errors[0]
print("%s rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d client_cpu_us=%.1f" % (
    label, len(latencies) / float(seconds), p(0.5), p(0.99), errors[0],
    cpu_used * 1e6 / max(1, total) * (float(seconds) / (float(seconds) + 0.3))))
