"""Fixtures of the Python package's tests: seedd daemons as real processes,
raw loopback servers that misbehave, and log capture per logger."""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading

import pytest

BIN_DIR = os.environ.get("SEEDD_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
TOKEN = "python-test-token-5b1e"
HASH = "0123456789abcdef0123456789abcdef"

sys.path.insert(0, os.path.dirname(__file__))


class Process:
    """A program that prints '<name>: serving on HOST:PORT' when ready."""

    def __init__(self, argv, env=None):
        env = dict(os.environ, SEEDD_TOKEN=TOKEN, **(env or {}))
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
        line = self.proc.stdout.readline()
        if " serving on " not in line:
            self.proc.kill()
            raise RuntimeError(f"{argv[0]} did not start: {line!r}")
        host, _, port = line.strip().rsplit(" ", 1)[1].rpartition(":")
        self.addr = (host.strip("[]"), int(port))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start(request):
    """start(argv, env=None) -> Process, stopped after the test."""
    started = []

    def _start(argv, env=None):
        p = Process(argv, env)
        started.append(p)
        return p

    yield _start
    for p in started:
        p.stop()


@pytest.fixture
def pki(tmp_path):
    """A CA and a certificate for 127.0.0.1 signed by it, made by the openssl CLI."""
    d = tmp_path / "pki"
    d.mkdir()

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    for name in ("ca", "server"):
        run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
            f"{name}.key")
    run("req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "30", "-subj", "/CN=ca")
    run("req", "-new", "-key", "server.key", "-out", "server.csr", "-subj", "/CN=server")
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "30", "-extfile", "server.ext")
    return d


@pytest.fixture
def seedd_bin():
    return os.path.join(BIN_DIR, "seedd")


@pytest.fixture
def seedctl_bin():
    return os.path.join(BIN_DIR, "seedctl")


class RawServer:
    """A loopback server answering each connection with `reply(conn)`."""

    def __init__(self, reply):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = self.sock.getsockname()[:2]
        self.reply = reply
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self.reply, args=(conn,), daemon=True).start()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def raw_server():
    servers = []

    def _make(reply):
        s = RawServer(reply)
        servers.append(s)
        return s

    yield _make
    for s in servers:
        s.close()


def read_frame(conn):
    head = b""
    while len(head) < 8:
        part = conn.recv(8 - len(head))
        if not part:
            return None
        head += part
    (size,) = struct.unpack(">Q", head)
    body = b""
    while len(body) < size:
        part = conn.recv(size - len(body))
        if not part:
            return None
        body += part
    return body


def frame(body: bytes) -> bytes:
    return struct.pack(">Q", len(body)) + body


@pytest.fixture
def logs(caplog):
    """The (level, message) lines logged at INFO and above."""
    caplog.set_level(logging.INFO)

    def _lines(name=None):
        return [(r.levelname, r.getMessage()) for r in caplog.records
                if name is None or r.name == name]

    return _lines
