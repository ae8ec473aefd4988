"""Interop: seedd answers the Python peer, and seedctl talks to the Python peer."""
import base64
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

import seedpeer

SEEDD = os.environ["SEEDD_BIN"]
SEEDCTL = os.environ["SEEDCTL_BIN"]
TOKEN = "interop-token-7f3a"
HASH = "0123456789abcdef0123456789abcdef"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class Daemon:
    """A process that prints '<name>: serving on HOST:PORT' when ready."""

    def __init__(self, argv):
        env = dict(os.environ, SEEDD_TOKEN=TOKEN)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
        line = self.proc.stdout.readline()
        if " serving on " not in line:
            self.proc.kill()
            raise RuntimeError(f"{argv[0]} did not start: {line!r}")
        self.addr = line.strip().rsplit(" ", 1)[1]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10)


class InteropTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="seedd-interop-")
        self.data = os.urandom(200_000)
        write(os.path.join(self.dir, "warm", "triton", HASH, "kernels.bin"), self.data)
        self.key = {"kind": "artifact", "namespace": "triton", "config_hash": HASH,
                    "filename": "kernels.bin"}

    def tearDown(self):
        shutil.rmtree(self.dir)

    def start_seedd(self):
        d = Daemon([SEEDD, "--listen", "127.0.0.1:0", "--cache-dir",
                    os.path.join(self.dir, "warm"), "--log-level", "warn"])
        self.addCleanup(d.stop)
        return d

    def start_python_peer(self):
        d = Daemon([sys.executable, seedpeer.__file__, "serve", "--listen", "127.0.0.1:0",
                    "--cache-dir", os.path.join(self.dir, "warm")])
        self.addCleanup(d.stop)
        return d

    def test_seedd_answers_the_python_client(self):
        d = self.start_seedd()
        addr = seedpeer.parse_addr(d.addr)
        r = seedpeer.request(addr, self.key, TOKEN)
        self.assertEqual(r["status"], "ok")
        payload = r["payload"]
        self.assertEqual(base64.b64decode(payload["data"]), self.data)
        self.assertEqual(payload["sha256"], hashlib.sha256(self.data).hexdigest())
        self.assertEqual(payload["size"], len(self.data))
        self.assertEqual(seedpeer.request(addr, dict(self.key, filename="none"), TOKEN),
                         {"status": "miss"})
        self.assertEqual(seedpeer.request(addr, self.key, "wrong"),
                         {"status": "error", "message": "Unauthorized request"})
        self.assertEqual(seedpeer.request(addr, {"kind": "nope"}, TOKEN),
                         {"status": "error", "message": "unsupported seed kind"})
        self.assertEqual(seedpeer.request(addr, dict(self.key, config_hash="XYZ"), TOKEN),
                         {"status": "error", "message": "invalid config_hash"})

    def test_seedd_rejects_an_oversized_frame_from_python(self):
        d = self.start_seedd()
        with socket.create_connection(seedpeer.parse_addr(d.addr), timeout=10) as sock:
            sock.sendall(struct.pack(">Q", 1 << 40))
            self.assertEqual(seedpeer.recv_json(sock), {
                "status": "error", "message": "Message size 1099511627776 exceeds limit 65536"})

    def test_seedctl_requests_from_the_python_server(self):
        d = self.start_python_peer()
        env = dict(os.environ, SEEDD_TOKEN=TOKEN)
        base = [SEEDCTL, "request", "--source", d.addr, "--kind", "artifact",
                "--param", "namespace=triton", "--param", f"config_hash={HASH}"]
        ok = subprocess.run(base + ["--param", "filename=kernels.bin"], env=env,
                            capture_output=True, text=True, timeout=30)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn('"status":"ok"', ok.stdout)
        miss = subprocess.run(base + ["--param", "filename=none"], env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(miss.returncode, 3)
        self.assertEqual(miss.stdout.strip(), '{"status":"miss"}')
        bad = subprocess.run(base + ["--param", "filename=kernels.bin"],
                             env=dict(os.environ, SEEDD_TOKEN="wrong"),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 4)
        self.assertIn("Unauthorized request", bad.stdout)

    def test_seedctl_fetches_byte_identical_from_the_python_server(self):
        d = self.start_python_peer()
        cold = os.path.join(self.dir, "cold")
        r = subprocess.run([SEEDCTL, "fetch", "--source", d.addr, "--namespace", "triton",
                            "--config-hash", HASH, "--filename", "kernels.bin",
                            "--cache-dir", cold],
                           env=dict(os.environ, SEEDD_TOKEN=TOKEN),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(cold, "triton", HASH, "kernels.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data)


if __name__ == "__main__":
    unittest.main()
