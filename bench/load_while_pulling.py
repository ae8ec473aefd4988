"""Tensors while the bytes land: a 512 MiB model of 8 safetensors shards
pulled from a seedd daemon on the loopback, three ways, alternated, in one
run: the pull alone (seedd.pull), the pull then a load of every tensor, and
seedd.load_safetensors (each shard's tensors read while the next arrive).
"Load" takes every tensor into torch and copies it (as an engine copies its
weights to the device): the copy touches every byte. Medians of REPS."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import seedd
from seedd._tensors import tensors_of

bin_dir, reps = sys.argv[1], int(os.environ.get("REPS", "3"))
shards, mib = int(os.environ.get("SHARDS", "8")), int(os.environ.get("SHARD_MIB", "64"))
work = tempfile.mkdtemp(prefix="seedd-load-")
token = os.urandom(16).hex()
os.environ["SEEDD_TOKEN"] = token
try:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
    import json

    model = os.path.join(work, "model")
    os.makedirs(model)
    n = mib * 1024 * 1024 // 2
    for i in range(1, shards + 1):
        header = {}
        per = n // 8
        for k in range(8):
            header["layers.%d.w%d" % (i, k)] = {"dtype": "F16", "shape": [per // 1024, 1024],
                                                "data_offsets": [k * per * 2, (k + 1) * per * 2]}
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(model, "model-%05d-of-%05d.safetensors" % (i, shards)), "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            f.write(os.urandom(8 * per * 2))
    daemon = subprocess.Popen([os.path.join(bin_dir, "seedd"), "--listen", "127.0.0.1:0",
                               "--cache-dir", os.path.join(work, "cache"), "--model",
                               "m=" + model, "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
    line = daemon.stdout.readline()
    addr = line.strip().rsplit(" ", 1)[1]
    total = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model))

    def take(t):
        return t.clone()

    def pull_alone(into):
        seedd.pull("m", addr, into, order="index")

    def pull_then_load(into):
        seedd.pull("m", addr, into, order="index")
        for f in sorted(os.listdir(into)):
            for _, t in tensors_of(os.path.join(into, f)):
                take(t)

    def streamed(into):
        stream = seedd.load_safetensors("m", addr, into)
        for _, t in stream:
            take(t)
        assert sum(1 for _, during in stream.files if during) >= 1, stream.files

    ways = [("pull alone", pull_alone), ("pull, then load", pull_then_load),
            ("load_safetensors", streamed)]
    times = {name: [] for name, _ in ways}
    for r in range(reps):
        for name, fn in ways:
            into = os.path.join(work, "out")
            shutil.rmtree(into, ignore_errors=True)
            began = time.monotonic()
            fn(into)
            times[name].append(time.monotonic() - began)
            shutil.rmtree(into, ignore_errors=True)
    daemon.terminate()
    daemon.wait()
    print("load_while_pulling: %d MiB in %d shards, %d runs each, alternated" %
          (total >> 20, shards, reps))
    alone = statistics.median(times["pull alone"])
    for name, _ in ways:
        med = statistics.median(times[name])
        print("  %-18s %s -> median %.3f s (%.2fx the pull alone)" %
              (name, ", ".join("%.3f" % t for t in times[name]), med, med / alone))
    print("load_while_pulling: pull=%.3f s pull_then_load=%.3f s streamed=%.3f s "
          "streamed/pull=%.2f pull_then_load/pull=%.2f" %
          (alone, statistics.median(times["pull, then load"]),
           statistics.median(times["load_safetensors"]),
           statistics.median(times["load_safetensors"]) / alone,
           statistics.median(times["pull, then load"]) / alone))
finally:
    shutil.rmtree(work, ignore_errors=True)
