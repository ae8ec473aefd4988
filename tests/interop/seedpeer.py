#!/usr/bin/env python3
"""A stdlib-only peer of the seed control channel, written from the protocol text.

Frames are an 8-byte unsigned big-endian length followed by UTF-8 JSON
(`json.dumps(obj).encode()`). One request and one response per connection.
Like the reference implementation, the server handles one connection at a time.

    seedpeer.py serve --listen 127.0.0.1:0 --cache-dir DIR     (token: $SEEDD_TOKEN)
    seedpeer.py request --source HOST:PORT --kind KIND [--param K=V]...
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import sys
import time

MAX_REMOTE_REQUEST_SIZE = 64 * 1024
MAX_RESPONSE_SIZE = 64 * 1024 * 1024
REMOTE_REQUEST_TIMEOUT_S = 5.0
AUTHENTICATED_TIMEOUT_S = 300.0

_NAMESPACE_RE = re.compile(r"[a-z0-9_.-]{1,64}")
_CONFIG_HASH_RE = re.compile(r"[0-9a-f]{16,128}")
_FILENAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,255}")


def send_json(sock, obj):
    body = json.dumps(obj).encode()
    sock.sendall(struct.pack(">Q", len(body)) + body)


def _recv_exact(sock, n, deadline):
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline exceeded")
            sock.settimeout(left)
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed mid-frame")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_json(sock, max_size=MAX_RESPONSE_SIZE, deadline=None):
    (size,) = struct.unpack(">Q", _recv_exact(sock, 8, deadline))
    if size > max_size:
        raise ValueError(f"Message size {size} exceeds limit {max_size}")
    return json.loads(_recv_exact(sock, size, deadline).decode())


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class ArtifactSeedable:
    """The `artifact` kind: files under <cache_dir>/<namespace>/<config_hash>/<filename>."""

    kind = "artifact"

    def __init__(self, cache_dir):
        self.cache_dir = cache_dir

    def resolve(self, request):
        fields = {}
        for name, pattern in (("namespace", _NAMESPACE_RE), ("config_hash", _CONFIG_HASH_RE),
                              ("filename", _FILENAME_RE)):
            value = request[name]
            if not isinstance(value, str) or not pattern.fullmatch(value) or value in (".", ".."):
                raise ValueError(f"invalid {name}")
            fields[name] = value
        path = os.path.join(self.cache_dir, fields["namespace"], fields["config_hash"],
                            fields["filename"])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return {"filename": fields["filename"], "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "data": base64.b64encode(data).decode()}


class Server:
    def __init__(self, seedables, token, listen):
        self.seedables = {s.kind: s for s in seedables}
        self.token = token
        family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
        self.sock = socket.create_server(listen, family=family)

    def address(self):
        return self.sock.getsockname()[:2]

    def handle_request(self, request):
        kind = request.get("kind") if isinstance(request, dict) else None
        seedable = self.seedables.get(kind) if isinstance(kind, str) else None
        if seedable is None:
            return {"status": "error", "message": "unsupported seed kind"}
        try:
            payload = seedable.resolve(request)
        except KeyError as e:
            return {"status": "error", "message": f"missing field {e}"}
        except (OSError, TypeError, ValueError) as e:
            return {"status": "error", "message": str(e)}
        if payload is None:
            return {"status": "miss"}
        return {"status": "ok", "payload": payload}

    def serve_forever(self):
        while True:
            conn, _ = self.sock.accept()
            with conn:
                try:
                    request = recv_json(conn, MAX_REMOTE_REQUEST_SIZE,
                                        time.monotonic() + REMOTE_REQUEST_TIMEOUT_S)
                    presented = request.get("token") if isinstance(request, dict) else None
                    if (not self.token or not isinstance(presented, str)
                            or not hmac.compare_digest(presented.encode(), self.token.encode())):
                        send_json(conn, {"status": "error", "message": "Unauthorized request"})
                        continue
                    conn.settimeout(AUTHENTICATED_TIMEOUT_S)
                    send_json(conn, self.handle_request(request))
                except (OSError, ValueError) as e:
                    try:
                        send_json(conn, {"status": "error", "message": str(e)})
                    except OSError:
                        pass


def request(source, payload, token, timeout=30.0):
    """Sends one request; returns the response (any JSON value)."""
    with socket.create_connection(source, timeout=timeout) as sock:
        send_json(sock, {**payload, "token": token})
        return recv_json(sock)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--listen", default="127.0.0.1:0")
    serve.add_argument("--cache-dir", required=True)
    req = sub.add_parser("request")
    req.add_argument("--source", required=True)
    req.add_argument("--kind", required=True)
    req.add_argument("--param", action="append", default=[])
    args = parser.parse_args(argv)
    token = os.environ.get("SEEDD_TOKEN", "")
    if args.cmd == "serve":
        server = Server([ArtifactSeedable(args.cache_dir)], token, parse_addr(args.listen))
        host, port = server.address()
        print(f"seedpeer: serving on {host}:{port}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        return 0
    payload = {"kind": args.kind}
    for kv in args.param:
        k, _, v = kv.partition("=")
        payload[k] = v
    print(json.dumps(request(parse_addr(args.source), payload, token)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
