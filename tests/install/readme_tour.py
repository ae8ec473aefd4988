#!/usr/bin/env python3
"""Runs the README's "A short tour" as written, on one machine made to look
like the tour's fleet.

Run by readme_tour_test.sh inside new network and mount namespaces (as root):
the tour's addresses (10.0.0.5, ...) are put on loopback, and /etc, /var/cache,
/opt, /srv and /root are overlays whose writes vanish with the namespace, so
the tour writes to the paths it names (/etc/seedd/token, /var/cache/seedd, ...)
and the host keeps none of it. What a real fleet has and the tour does not
make is set up first: the Redis and S3-compatible store it names (a real
redis-server and s3rver, under the names cache.internal and s3.internal), the
engine's autotune program, a model directory and a Hugging Face cache.

The tour's code blocks are parsed as a reader would: in a block with "$ "
lines, those are the commands (continued by a trailing backslash) and the
lines after one are its output; a block without them is commands, one per
line. Each command runs with bash, the build's seedd and seedctl first on the
PATH. A `seedd` command is a daemon: it runs in the background, its one line
on stdout must come (and match the output shown), and it runs until a later
daemon starts (daemons a later one names with --source stay up) or the tour
ends, when each must stop cleanly on SIGTERM. Any other command must exit 0
(3 where it shows a miss, as the README's exit statuses say) and print what the
README shows ("..." matches anything, a time in ms any time).
"""
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

README, BIN, REPO = sys.argv[1], sys.argv[2], sys.argv[3]
SCRATCH = tempfile.mkdtemp(prefix="seedd-tour-")


def say(text):
    print("tour: " + text, flush=True)


def fail(text):
    print("tour: FAILED: " + text, flush=True)
    sys.exit(1)


def run(argv, **kw):
    subprocess.run(argv, check=True, **kw)


def wait_port(port, what):
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    fail(what + " did not start on port %d" % port)


def tour_blocks():
    text = open(README).read()
    start = text.index("## A short tour")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```\n(.*?)```", text[start:end], re.S)


def steps(block):
    """(command, expected output lines) of one code block."""
    lines = block.rstrip("\n").split("\n")
    prompted = any(l.startswith("$ ") for l in lines)
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if prompted and not line.startswith("$ "):
            if not out:
                fail("output before any command in a block:\n" + block)
            out[-1][1].append(line)
            i += 1
            continue
        command = line[2:] if prompted else line
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        out.append((command, []))
        i += 1
    return out


def pattern(line):
    p = re.escape(line)
    p = p.replace(re.escape("..."), ".*")
    p = re.sub(r"[0-9]+\\\.[0-9]+\\ ms", r"[0-9.]+\\ ms", p)
    return re.compile(p)


def check_output(command, expected, got):
    lines = [l for l in got.split("\n") if l]
    for want in expected:
        if not any(pattern(want).fullmatch(l) for l in lines):
            fail("%s\nprinted:\n%s\nnot a line like:\n%s" % (command, got, want))


# ---- The world the tour assumes --------------------------------------------

def overlay(path):
    upper = os.path.join(SCRATCH, "upper" + path.replace("/", "_"))
    work = os.path.join(SCRATCH, "work" + path.replace("/", "_"))
    os.makedirs(upper)
    os.makedirs(work)
    run(["mount", "-t", "overlay", "overlay", "-o",
         "lowerdir=%s,upperdir=%s,workdir=%s" % (path, upper, work), path])


def write(path, data, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


def set_up(blocks):
    addresses = sorted(set(re.findall(r"\b10\.\d+\.\d+\.\d+\b", "".join(blocks))))
    run(["ip", "link", "set", "lo", "up"])
    for a in addresses:
        run(["ip", "addr", "add", a + "/32", "dev", "lo"])
    say("the fleet's addresses on loopback: " + ", ".join(addresses))
    for path in ["/etc", "/var/cache", "/opt", "/srv", "/root"]:
        overlay(path)
    with open("/etc/hosts", "a") as f:
        f.write("127.0.0.1 cache.internal s3.internal\n")
    # The stores the tour names.
    redis = subprocess.Popen(["redis-server", "--port", "6379", "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(6379, "redis-server")
    s3dir = os.path.join(SCRATCH, "s3")
    os.makedirs(s3dir)
    s3 = subprocess.Popen(["node", os.path.join(REPO, "tools/s3rver/node_modules/s3rver/bin/s3rver.js"),
                           "-d", s3dir, "-a", "127.0.0.1", "-p", "9000", "-s",
                           "--configure-bucket", "warm-state", "--no-vhost-buckets"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(9000, "s3rver")
    os.environ["AWS_ACCESS_KEY_ID"] = "S3RVER"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "S3RVER"
    # The engine's autotune program: it leaves its table where seedd says.
    write("/opt/engine/bin/autotune",
          b"#!/bin/sh\nprintf '{\"_metadata\": {\"gpu\": \"tour\"}, \"rank\": \"%s\"}' "
          b"\"$SEEDD_RANK\" > \"$SEEDD_AUTOTUNE_TABLE\"\n", 0o755)
    # A model directory, and a model in the Hugging Face cache.
    weights = os.urandom(3 << 20)
    write("/srv/models/llama-3-8b/model.safetensors", safetensors(weights))
    write("/srv/models/llama-3-8b/config.json", b'{"model_type": "llama"}\n')
    hub = "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B"
    commit = "0e9e39f249a16976918f6564b8830bc894c89659"
    for name, data in [("model.safetensors", safetensors(weights)),
                       ("config.json", b'{"model_type": "llama"}\n')]:
        import hashlib
        blob = hashlib.sha256(data).hexdigest()
        write(hub + "/blobs/" + blob, data)
        os.makedirs(hub + "/snapshots/" + commit, exist_ok=True)
        os.symlink("../../blobs/" + blob, hub + "/snapshots/" + commit + "/" + name)
    write(hub + "/refs/main", commit.encode())
    return [redis, s3]


def safetensors(data):
    import json
    import struct
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(data)],
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


# ---- The tour ---------------------------------------------------------------

def flag(words, name):
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
    return None


def stop(daemon):
    command, process = daemon
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        fail("did not stop within 30 s of SIGTERM: " + command)
    if code != 0:
        process.log.seek(0)
        fail("exited %d on SIGTERM: %s\n%s" % (code, command, process.log.read()))


def main():
    blocks = tour_blocks()
    servers = set_up(blocks)
    env = dict(os.environ, PATH=BIN + ":" + os.environ["PATH"])
    daemons = {}  # listen address -> (command, process)
    logs = []
    started = time.monotonic()
    try:
        for block in blocks:
            for command, expected in steps(block):
                words = shlex.split(command)
                if words[0] == "seedd":
                    keep = flag(words, "--source")
                    for listen in [a for a in daemons if a != keep]:
                        stop(daemons.pop(listen))
                    say("$ " + command)
                    log = open(os.path.join(SCRATCH, "daemon-%d.log" % len(logs)), "w+")
                    logs.append(log)
                    p = subprocess.Popen(["bash", "-c", command], env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=log)
                    p.log = log
                    line = p.stdout.readline()
                    if not line:
                        p.wait()
                        log.seek(0)
                        fail("%s\nexited %s without its ready line:\n%s"
                             % (command, p.returncode, log.read()))
                    check_output(command, expected, line)
                    daemons[flag(words, "--listen")] = (command, p)
                    continue
                say("$ " + command)
                r = subprocess.run(["bash", "-c", command], env=env, text=True,
                                   capture_output=True, timeout=300)
                # A miss exits 3, as the README's table of exit statuses says.
                code = 3 if any('"status":"miss"' in e for e in expected) else 0
                if r.returncode != code:
                    fail("%s\nexited %d:\n%s%s" % (command, r.returncode, r.stdout, r.stderr))
                check_output(command, expected, r.stdout)
        for listen in list(daemons):
            stop(daemons.pop(listen))
    finally:
        for _, p in daemons.values():
            p.kill()
        for s in servers:
            s.kill()
        subprocess.run(["rm", "-rf", SCRATCH])
    say("the tour ran as written in %.1f s" % (time.monotonic() - started))


main()
