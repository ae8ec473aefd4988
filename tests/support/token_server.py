#!/usr/bin/env python3
"""A registry token service (the Docker registry token protocol) for tests.

GET /token?service=S&scope=repository:NAME:ACTIONS answers {"token": JWT}: an
RS256 JWT signed with KEY (openssl CLI), its certificate in the x5c header,
granting the actions asked. With USER:PASSWORD, a request without those basic
credentials is answered 401. Each request is appended to LOG as one line.

usage: token_server.py PORT KEY CERT ISSUER SERVICE LOG [USER:PASSWORD]
"""
import base64
import http.server
import json
import subprocess
import sys
import time
import urllib.parse

port, key, cert, issuer, service, log = sys.argv[1:7]
creds = sys.argv[7] if len(sys.argv) > 7 else ""
der = subprocess.run(["openssl", "x509", "-in", cert, "-outform", "DER"], check=True,
                     capture_output=True).stdout


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(payload):
    header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(payload).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input.encode(),
                         check=True, capture_output=True).stdout
    return signing_input + "." + b64url(sig)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        auth = self.headers.get("Authorization", "")
        with open(log, "a") as f:
            f.write(json.dumps({"path": url.path, "query": query, "basic": auth.startswith("Basic ")}) + "\n")
        if creds and auth != "Basic " + base64.b64encode(creds.encode()).decode():
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"details": "wrong credentials"}')
            return
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        token = sign({"iss": issuer, "sub": "seedd", "aud": query.get("service", [""])[0],
                      "exp": now + 300, "nbf": now - 10, "iat": now, "jti": str(now),
                      "access": access})
        body = json.dumps({"token": token, "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler).serve_forever()
