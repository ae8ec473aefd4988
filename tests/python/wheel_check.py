"""Run by tests/install/wheel_test.sh with a venv's interpreter, the wheel
installed there and nothing else on the path: the package imports from the
venv, its reference-compatible transport serves and fetches a seedable, and a
pull lands a model from a seedd daemon. Usage: wheel_check.py SEEDD_BIN WORKDIR"""

import filecmp
import os
import subprocess
import sys

import seedd

seedd_bin, work = sys.argv[1], sys.argv[2]
TOKEN = "wheel-check-token-4c7f01"
assert os.path.realpath(seedd.__file__).startswith(os.path.realpath(sys.prefix)), seedd.__file__
assert "PYTHONPATH" not in os.environ


class Table:
    kind = "flashinfer_autotune"

    def __init__(self, table=None):
        self.table, self.installed = table, None

    def request_params(self, ctx):
        return {"config_hash": "abc"}

    def resolve(self, request):
        if request.get("config_hash") != "abc":
            raise ValueError("invalid config_hash")
        return self.table

    def validate_payload(self, payload):
        if not isinstance(payload, dict):
            raise ValueError("not a table")
        return payload

    def install(self, ctx, payload):
        self.installed = payload


# The transport: a listener serving a Python seedable, a second transport
# adopting from it.
served = seedd.SeedTransport([Table({"gemm": [1, 2, 3]})],
                             seedd.SeedConfig(listen=("127.0.0.1", 0), token=TOKEN))
addr = served.start_listener()
target = Table()
seedd.SeedTransport([target], seedd.SeedConfig(source=addr, token=TOKEN)).adopt(target, None)
assert target.installed == {"gemm": [1, 2, 3]}, target.installed
assert served.request({"kind": "x"}) is None  # no source configured: None, as the reference
served.close()

# A pull from a real daemon.
model = os.path.join(work, "model")
os.makedirs(model)
with open(os.path.join(model, "model.bin"), "wb") as f:
    f.write(os.urandom(2 * 1024 * 1024 + 5))
with open(os.path.join(model, "config.json"), "w") as f:
    f.write('{"layers": 2}')
daemon = subprocess.Popen(
    [seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", os.path.join(work, "cache"),
     "--model", "m=" + model, "--log-level", "warn"],
    stdout=subprocess.PIPE, text=True, env=dict(os.environ, SEEDD_TOKEN=TOKEN))
try:
    line = daemon.stdout.readline()
    assert " serving on " in line, line
    source = line.strip().rsplit(" ", 1)[1]
    stats = seedd.pull("m", source, os.path.join(work, "out"), token=TOKEN)
    assert stats.total_bytes == 2 * 1024 * 1024 + 5 + len('{"layers": 2}'), stats
    cmp = filecmp.dircmp(model, os.path.join(work, "out"))
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files), cmp.report()
    try:
        seedd.pull("other", source, os.path.join(work, "out2"), token=TOKEN, timeout=10)
        raise AssertionError("a model the daemon does not serve was pulled")
    except seedd.Error as e:
        assert e.code == "NotFound", (e.code, str(e))
finally:
    daemon.terminate()
    daemon.wait()
print(f"wheel_check: seedd {seedd.__version__} on Python {sys.version.split()[0]}: transport and pull OK")
