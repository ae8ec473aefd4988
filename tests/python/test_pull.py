"""seedd.pull and seedd.Manifest against a seedd daemon serving a model:
a verified pull with its statistics and progress, the version pin, failures as
seedd.Error with the daemon's words and code, and Ctrl-C."""

from __future__ import annotations

import _thread
import filecmp
import json
import math
import os
import subprocess
import sys
import socket
import threading
import time

import pytest

import seedd
from conftest import TOKEN


def make_model(root):
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    with open(os.path.join(root, "model.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024 + 17))
    with open(os.path.join(root, "sub", "config.json"), "w") as f:
        f.write('{"layers": 2}')
    return root


@pytest.fixture
def served(start, seedd_bin, tmp_path):
    model = make_model(str(tmp_path / "model"))
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir",
                    str(tmp_path / "cache"), "--model", f"tiny={model}", "--chunk-mib", "0.25",
                    "--log-level", "warn"])
    return daemon, model


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def test_a_pull_lands_the_model_verified_with_its_statistics(served, tmp_path):
    daemon, model = served
    seen = []
    stats = seedd.pull("tiny", "%s:%d" % daemon.addr, tmp_path / "out", token=TOKEN,
                       progress=seen.append)
    assert same_tree(model, tmp_path / "out")
    assert stats.model == "tiny"
    assert stats.total_bytes == 3 * 1024 * 1024 + 17 + len('{"layers": 2}')
    assert stats.bytes_received >= stats.total_bytes - len('{"layers": 2}')
    assert stats.chunks_rejected == 0 and not stats.up_to_date
    assert [u["name"] for u in stats.used] == ["%s:%d" % daemon.addr]
    assert seen and seen[-1]["verified_bytes"] == stats.total_bytes
    assert all(p["total_bytes"] == stats.total_bytes for p in seen)
    # The manifest built here names the same version the daemon served.
    assert seedd.Manifest.build("tiny", model, chunk_size=256 * 1024).root_digest == \
        stats.root_digest
    # Again: nothing moves.
    again = seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN)
    assert again.up_to_date and again.bytes_received == 0


def test_reuse_from_copies_what_an_earlier_version_shares(start, seedd_bin, tmp_path):
    # An earlier version held locally; the new one changed config.json only.
    model = make_model(str(tmp_path / "model"))
    earlier = tmp_path / "earlier"
    subprocess.run(["cp", "-r", model, str(earlier)], check=True)
    with open(os.path.join(model, "sub", "config.json"), "w") as f:
        f.write('{"layers": 3}')
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir",
                    str(tmp_path / "cache"), "--model", f"tiny={model}", "--chunk-mib", "0.25",
                    "--log-level", "warn"])
    stats = seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN,
                       reuse_from=[earlier])
    assert same_tree(model, tmp_path / "out")
    assert stats.bytes_received == len('{"layers": 3}')
    assert stats.bytes_reused == 3 * 1024 * 1024 + 17
    assert stats.chunks_reused == 13


def test_a_pin_to_another_version_moves_nothing(served, tmp_path):
    daemon, _ = served
    with pytest.raises(seedd.Error) as e:
        seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN,
                   root_digest="a" * 64)
    assert e.value.code == "FailedPrecondition"
    assert "not the pinned" in str(e.value)
    assert not os.path.exists(tmp_path / "out")


def test_verify_upstream_asks_the_registry_before_any_byte_moves(served, tmp_path):
    # A registry that cannot be reached: the pull stops before asking a daemon,
    # saying so (the end-to-end pin is tested against a real registry in e2e).
    daemon, _ = served
    with pytest.raises(seedd.Error) as e:
        seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN,
                   verify_upstream="oci://127.0.0.1:9/models/tiny:v1?plain-http=true")
    assert e.value.code == "Unavailable"
    assert "the upstream to verify against" in str(e.value)
    assert "127.0.0.1:9/v2/models/tiny/manifests/v1" in str(e.value)
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(seedd.Error) as e:
        seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN,
                   verify_upstream="https://example.com/x")
    assert e.value.code == "InvalidArgument"


def test_failures_raise_seedd_error_with_the_daemons_words(served, tmp_path):
    daemon, _ = served
    with pytest.raises(seedd.Error) as e:
        seedd.pull("nosuch", [daemon.addr], tmp_path / "out", token=TOKEN)
    assert e.value.code == "NotFound"
    with pytest.raises(seedd.Error) as e:
        seedd.pull("tiny", "no-port", tmp_path / "out", token=TOKEN)
    assert e.value.code == "InvalidArgument"
    with pytest.raises(seedd.Error) as e:
        seedd.pull("tiny", [daemon.addr], tmp_path / "out", token="wrong-token", timeout=2)
    assert "Unauthorized" in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="token"):
        seedd.pull("tiny", [daemon.addr], tmp_path / "out", token="")
    assert not os.path.exists(tmp_path / "out")


def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_a_value_error(served, tmp_path):
    daemon, _ = served
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
            seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN, timeout=bad)
        with pytest.raises(ValueError, match="response_timeout"):
            seedd._native.exchange(("127.0.0.1", 1), {"kind": "artifact"}, 1.0, bad)
    assert not os.path.exists(tmp_path / "out")


def test_the_package_speaks_tls_verifying_daemons_against_a_ca(start, seedd_bin, tmp_path, pki):
    model = make_model(str(tmp_path / "model"))
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "cache"),
                    "--model", f"tiny={model}", "--chunk-mib", "0.25", "--log-level", "warn",
                    "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key")])
    stats = seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN, tls_ca=pki / "ca.crt")
    assert same_tree(model, str(tmp_path / "out"))
    assert stats.total_bytes > 0
    # The control channel too, and a listener of the package's own.
    answer = seedd._native.exchange(daemon.addr, {"kind": "catalog", "prefix": "", "token": TOKEN},
                                   5.0, 5.0, str(pki / "ca.crt"))
    assert answer["status"] == "ok", answer
    server = seedd._native.Server([], ("127.0.0.1", 0), TOKEN, tls_cert=str(pki / "server.crt"),
                                 tls_key=str(pki / "server.key"))
    addr = server.start()
    try:
        answer = seedd._native.exchange(addr, {"kind": "catalog", "token": TOKEN}, 5.0, 5.0,
                                       str(pki / "ca.crt"))
        assert answer["status"] == "error", answer  # no seedables: but over TLS, answered
        # A plain client is told, in plain words.
        plain = seedd._native.exchange(addr, {"kind": "catalog", "token": TOKEN}, 5.0, 5.0)
        assert "this port speaks TLS" in plain.get("message", ""), plain
    finally:
        server.close()
    with pytest.raises(ValueError, match="TLS"):
        seedd.pull("tiny", [daemon.addr], tmp_path / "x", token=TOKEN, tls_ca=tmp_path / "nope")
    # The drop-in transport, unchanged engine code, TLS from the environment.
    os.environ["SEEDD_TLS_CA"] = str(pki / "ca.crt")
    try:
        t = seedd.SeedTransport([], seedd.SeedConfig(source=daemon.addr, token=TOKEN))
        assert t.tls.ca == str(pki / "ca.crt")
        assert t.request({"kind": "catalog", "prefix": ""})["status"] == "ok"
    finally:
        del os.environ["SEEDD_TLS_CA"]


def test_trust_keys_pull_only_a_manifest_the_publisher_signed(start, seedd_bin, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("publisher", "stranger"):
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", f"{name}.pem"],
                       check=True, capture_output=True, cwd=keys)
        subprocess.run(["openssl", "pkey", "-in", f"{name}.pem", "-pubout", "-out",
                        f"{name}.pub.pem"], check=True, capture_output=True, cwd=keys)
    model = make_model(str(tmp_path / "model"))
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "cache"),
                    "--model", f"tiny={model}", "--chunk-mib", "0.25", "--log-level", "warn",
                    "--sign-key", str(keys / "publisher.pem")])
    seedd.pull("tiny", [daemon.addr], tmp_path / "out", token=TOKEN,
               trust_keys=[keys / "publisher.pub.pem"])
    assert same_tree(model, str(tmp_path / "out"))
    with pytest.raises(seedd.Error, match="which is not trusted") as refused:
        seedd.pull("tiny", [daemon.addr], tmp_path / "x", token=TOKEN,
                   trust_keys=[keys / "stranger.pub.pem"])
    assert refused.value.code == "FailedPrecondition"
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(ValueError, match="trust_keys"):
        seedd.pull("tiny", [daemon.addr], tmp_path / "y", token=TOKEN, trust_keys=[model])


def test_ctrl_c_stops_a_pull_and_is_raised(tmp_path):
    # A source that accepts and never answers: the pull waits on it.
    server = socket.create_server(("127.0.0.1", 0))
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        seedd.pull("tiny", [server.getsockname()], tmp_path / "out", token=TOKEN, timeout=60)
    assert time.monotonic() - began < 30  # not the 60 s timeout
    assert not os.path.exists(tmp_path / "out")
    server.close()


def test_a_manifest_is_validated_when_read(tmp_path):
    model = make_model(str(tmp_path / "model"))
    m = seedd.Manifest.build("tiny", model)
    assert m.model == "tiny" and len(m.root_digest) == 64
    assert [f["path"] for f in m.files] == ["model.bin", "sub/config.json"]
    assert seedd.Manifest.parse(m.to_json()).root_digest == m.root_digest
    bad = m.to_json()
    bad["files"][0]["path"] = "../escape"
    with pytest.raises(seedd.Error) as e:
        seedd.Manifest.parse(bad)
    assert e.value.code == "InvalidArgument", str(e.value)
    with pytest.raises(seedd.Error):
        seedd.Manifest.build("tiny", str(tmp_path / "missing"))


def test_the_librarys_info_lines_reach_stderr_only_when_asked(served, tmp_path):
    daemon, _ = served
    script = (
        "import logging, sys, seedd\n"
        "if sys.argv[1] == 'ask':\n"
        "    seedd.set_log_level('info')\n"
        "    logging.basicConfig(level=logging.INFO)\n"
        "seedd.pull('tiny', [sys.argv[2]], sys.argv[3], token=sys.argv[4])\n"
        "try:\n"
        "    seedd.pull('tiny', ['127.0.0.1:1'], sys.argv[3] + '-x', token=sys.argv[4], timeout=0.5)\n"
        "except seedd.Error:\n"
        "    pass\n"
    )
    source = f"{daemon.addr[0]}:{daemon.addr[1]}"
    quiet = subprocess.run([sys.executable, "-c", script, "quiet", source, str(tmp_path / "a"), TOKEN],
                           capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert "INFO" not in quiet.stderr and "Pulled" not in quiet.stderr, quiet.stderr
    asked = subprocess.run([sys.executable, "-c", script, "ask", source, str(tmp_path / "b"), TOKEN],
                           capture_output=True, text=True, timeout=60)
    assert asked.returncode == 0, asked.stderr
    assert "INFO:seedd.core:" in asked.stderr, asked.stderr


def test_a_bad_argument_is_a_value_error_and_a_bad_peer_an_os_error(tmp_path):
    """The library says which errors are the caller's (found before any byte
    went out): those are ValueError, whatever their words; what a peer did is
    OSError, even when the peer's bytes were invalid."""
    with pytest.raises(ValueError):
        seedd._native.exchange(("127.0.0.1", 1), {"kind": "catalog"}, 5.0, 5.0,
                               str(tmp_path / "no-such-ca.pem"))
    # The C API marks them so: the Python layer reads a flag, not the words.
    native = seedd._native
    options = native._options(host="127.0.0.1", port=1, tls_ca=str(tmp_path / "no-such-ca.pem"))
    with pytest.raises(native.NativeError) as marked:
        native._call(native._lib.seedd_exchange, options, b'{"kind": "catalog"}')
    assert marked.value.argument, marked.value.message
    with pytest.raises(native.NativeError) as unmarked:
        native._call(native._lib.seedd_exchange, native._options(host="127.0.0.1", port=1),
                     b'{"kind": "catalog"}')
    assert not unmarked.value.argument, unmarked.value.message
    # A peer that answers with what is not a frame: an HTTP server's words.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)

    t = threading.Thread(target=answer)
    t.start()
    try:
        with pytest.raises(OSError) as raised:
            seedd._native.exchange(listener.getsockname(), {"kind": "catalog", "token": TOKEN},
                                   5.0, 5.0)
        assert not isinstance(raised.value, ValueError)
    finally:
        t.join()
        listener.close()


def write_safetensors(path, tensors):
    """A safetensors file written by hand from the format's text: an 8-byte
    little-endian header length, the JSON header, then the bytes."""
    import torch
    names = {torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.uint8: "U8"}
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def sharded_model(root, shards=4, mib_each=16):
    import torch
    os.makedirs(root, exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    expected = {}
    for i in range(1, shards + 1):
        tensors = {
            "layers.%d.weight" % i: torch.randn(mib_each * 1024 * 256 - 64, generator=gen),
            "layers.%d.bias" % i: torch.arange(16, dtype=torch.int64) * i,
            "layers.%d.empty" % i: torch.zeros((0, 3), dtype=torch.float16),
        }
        expected.update(tensors)
        write_safetensors(os.path.join(root, "model-%05d-of-%05d.safetensors" % (i, shards)),
                          tensors)
    with open(os.path.join(root, "config.json"), "w") as f:
        f.write('{"layers": %d}' % shards)
    return expected


def test_load_safetensors_yields_each_shards_tensors_while_the_rest_still_arrives(
        start, seedd_bin, tmp_path):
    import torch
    expected = sharded_model(str(tmp_path / "model"))
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir",
                    str(tmp_path / "cache"), "--model", "shards=%s" % (tmp_path / "model"),
                    "--chunk-mib", "1", "--log-level", "warn"])
    into = tmp_path / "out"
    stream = seedd.load_safetensors("shards", daemon.addr, into, token=TOKEN)
    got, seen_before_commit = {}, []
    for name, t in stream:
        if not seen_before_commit:
            seen_before_commit.append(not into.exists())  # still staging
        got[name] = t
    assert set(got) == set(expected)
    for name, t in expected.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(got[name], t), name
    # The shards in order, the first read while the model was still arriving.
    assert [f for f, _ in stream.files] == sorted(f for f in os.listdir(into)
                                                  if f.endswith(".safetensors"))
    assert stream.files[0][1] and seen_before_commit == [True]
    assert stream.stats.total_bytes == sum(
        os.path.getsize(into / f) for f in os.listdir(into))
    # Zero copy: a tensor is a view of the file's mapping, not an array of its own.
    w = got["layers.1.weight"]
    assert w.storage().nbytes() > w.numel() * 4 - 1
    # Up to date now: every tensor again, read from `into` after the pull.
    again = seedd.load_safetensors("shards", daemon.addr, into, token=TOKEN)
    assert sorted(n for n, _ in again) == sorted(expected)
    assert again.stats.up_to_date and all(not during for _, during in again.files)


def test_the_tensor_reader_refuses_a_file_whose_header_lies(tmp_path):
    # A daemon refuses to serve such a file (its index checks every header);
    # the loader checks again before mapping a byte.
    import torch
    from seedd._tensors import tensors_of
    path = tmp_path / "model.safetensors"
    write_safetensors(str(path), {"w": torch.ones(4), "b": torch.ones(2)})
    good = path.read_bytes()
    n = int.from_bytes(good[:8], "little")

    def lying(old, new):
        header = good[8:8 + n].replace(old, new)
        path.write_bytes(len(header).to_bytes(8, "little") + header + good[8 + n:])
        with pytest.raises(seedd.Error) as e:
            list(tensors_of(str(path)))
        assert e.value.code == "DataLoss" and str(path) in str(e.value), str(e.value)
        return str(e.value)

    assert "'w'" in lying(b'"shape": [4]', b'"shape": [9]')  # 36 bytes claimed, 16 held
    assert "outside" in lying(b'"data_offsets": [16, 24]', b'"data_offsets": [16, 99]')
    assert "dtype 'Q7'" in lying(b'"F32"', b'"Q7"')
    path.write_bytes((1 << 40).to_bytes(8, "little") + good[8:])
    with pytest.raises(seedd.Error, match="a header of 1099511627776 bytes"):
        list(tensors_of(str(path)))
