"""A real consumer of a seeded compile cache: torch.utils.cpp_extension.load
(Debian's PyTorch), the ninja-based JIT build FlashInfer and similar kernel
libraries use. One host builds an extension; a daemon on another host seeds
the extension directory from it (`--warmup compile_cache:torch_extensions`,
the directory and key factors found by seedd); that host's load() then runs no
compiler, and the daemon reports the installed files as opened. A changed
source is rebuilt by the consumer, another torch version gets no cache, and a
cache nobody opens is reported as unused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import TOKEN

# The extension's source: the same path on every host, as an engine image has.
SOURCE = """#include <torch/extension.h>
torch::Tensor add(torch::Tensor x) { return x + %d; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &add); }
"""

LOAD = """import sys, torch, torch.utils.cpp_extension as ce
m = ce.load(name="seedd_probe", sources=[sys.argv[1]])
print(m.add(torch.zeros(2)).tolist())
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Host:
    """One engine host: its extensions directory and a compiler that logs
    every command it runs."""

    def __init__(self, root, name, wrapper):
        self.ext = root / name / "torch_extensions"
        self.env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(self.ext), CXX=str(wrapper),
                        MAX_JOBS="2")

    def load(self, source, compiles):
        compiles.write_text("")
        run = subprocess.run([sys.executable, "-c", LOAD, str(source)], env=self.env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        lines = [l for l in compiles.read_text().splitlines() if " -c " in l or "-shared" in l]
        return json.loads(run.stdout.strip().splitlines()[-1]), lines


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Host A has built the extension (cold: a real compile)."""
    root = tmp_path_factory.mktemp("engine")
    (root / "src").mkdir()
    source = root / "src" / "ext.cpp"
    source.write_text(SOURCE % 1)
    compiles = root / "compiles.log"
    wrapper = root / "cxx"
    wrapper.write_text('#!/bin/sh\necho "$*" >> %s\nexec c++ "$@"\n' % compiles)
    wrapper.chmod(0o755)
    a = Host(root, "a", wrapper)
    result, lines = a.load(source, compiles)
    assert result == [1.0, 1.0]
    assert lines, "the first load on host A compiles"
    return root, source, compiles, wrapper, a


def status(admin):
    with urllib.request.urlopen("http://127.0.0.1:%d/status" % admin, timeout=10) as r:
        return json.load(r)


def usage(admin, cache="compile_cache:torch_extensions"):
    for u in status(admin)["usage"]:
        if u["cache"] == cache:
            return u
    return None


def eventually(pred, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    return pred()


def daemon(start, seedd_bin, host, cache, *extra):
    return start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(cache),
                  "--warmup", "compile_cache:torch_extensions", "--python", sys.executable,
                  "--log-level", "warn", *extra], env=host.env)


def test_another_torch_version_gets_no_cache_and_an_unopened_cache_is_reported_unused(
        built, start, seedd_bin, seedctl_bin):
    root, source, compiles, wrapper, a = built
    seed = daemon(start, seedd_bin, a, root / "cache-a")
    # Another torch in the engine's environment: another key, nothing seeded.
    c = Host(root, "c", wrapper)
    daemon(start, seedd_bin, c, root / "cache-c", "--source", "%s:%d" % seed.addr,
           "--factor", "torch=2.5.1")
    assert not list(c.ext.rglob("*.so"))
    # Seeded, and no engine starts within the grace.
    d = Host(root, "d", wrapper)
    admin = free_port()
    daemon(start, seedd_bin, d, root / "cache-d", "--source", "%s:%d" % seed.addr,
           "--admin-listen", "127.0.0.1:%d" % admin, "--used-grace", "1")
    assert list(d.ext.rglob("seedd_probe.so"))
    u = eventually(lambda: (usage(admin) or {}).get("state") == "unused" and usage(admin))
    assert u and u["files_installed"] >= 3 and u["files_opened"] == 0, u
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10) as r:
        metrics = r.read().decode()
    assert 'seedd_installed_files_opened{cache="compile_cache:torch_extensions"} 0' in metrics
    shown = subprocess.run([seedctl_bin, "status", "--admin", "127.0.0.1:%d" % admin],
                           capture_output=True, text=True, timeout=30)
    assert "compile_cache:torch_extensions" in shown.stdout and "unused" in shown.stdout, \
        shown.stdout


def test_an_extension_seeded_from_another_host_loads_without_compiling(
        built, start, seedd_bin):
    root, source, compiles, wrapper, a = built
    seed = daemon(start, seedd_bin, a, root / "cache-a")
    b = Host(root, "b", wrapper)
    admin = free_port()
    daemon(start, seedd_bin, b, root / "cache-b", "--source", "%s:%d" % seed.addr,
           "--admin-listen", "127.0.0.1:%d" % admin)
    # Nothing opened yet (reading the files below is an open too).
    assert usage(admin)["state"] == "waiting"
    # Seeded before the daemon said it serves: the consumer's layout, times kept.
    built_so = a.ext / "seedd_probe" / "seedd_probe.so"
    seeded_so = b.ext / "seedd_probe" / "seedd_probe.so"
    assert seeded_so.read_bytes() == built_so.read_bytes()
    assert seeded_so.stat().st_mtime_ns == built_so.stat().st_mtime_ns
    assert (b.ext / "seedd_probe" / ".ninja_log").exists()

    opened_by_test = usage(admin)["files_opened"]
    result, lines = b.load(source, compiles)
    assert result == [1.0, 1.0]
    assert lines == [], "no compile or link ran on host B: %s" % lines
    # The load opened build.ninja and the logs ninja checks (the test read the .so).
    u = eventually(lambda: usage(admin)["files_opened"] > opened_by_test and usage(admin))
    assert u and u["state"] == "used" and u["first_open_after_seconds"] >= 0, usage(admin)

    # The source changes: the consumer rebuilds, never serving the seeded module.
    source.write_text(SOURCE % 2)
    result, lines = b.load(source, compiles)
    assert result == [2.0, 2.0]
    assert lines, "a changed source is compiled"


def test_a_pulled_model_is_watched_and_reported_unused_until_a_process_reads_it(
        start, seedd_bin, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(os.urandom(1 << 20))
    (model / "config.json").write_text("{}")
    seed = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "a"),
                  "--model", "m=%s" % model, "--log-level", "warn"])
    admin = free_port()
    node = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "b"),
                  "--pull", "m", "--source", "%s:%d" % seed.addr, "--admin-listen",
                  "127.0.0.1:%d" % admin, "--used-grace", "1", "--log-level", "warn"])
    u = eventually(lambda: (usage(admin, "m") or {}).get("state") == "unused" and usage(admin, "m"))
    assert u and u["files_installed"] == 2 and u["files_opened"] == 0, status(admin)["usage"]
    # The engine loads the weights through the daemon's `current` link.
    with open(tmp_path / "b" / "weights" / "m" / "current" / "weights.bin", "rb") as f:
        f.read(16)
    u = eventually(lambda: usage(admin, "m")["files_opened"] == 1 and usage(admin, "m"))
    assert u and u["state"] == "used", usage(admin, "m")
    # An engine that copies the model from the daemon (seedd.pull, seedctl pull)
    # reads every file through it: each counts as used too.
    import seedd
    seedd.pull("m", node.addr, tmp_path / "engine", token=os.environ.get("SEEDD_TOKEN") or TOKEN)
    u = eventually(lambda: usage(admin, "m")["files_opened"] == 2 and usage(admin, "m"))
    assert u, usage(admin, "m")
