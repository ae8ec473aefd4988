"""seedd.SeedTransport against the reference transport: the same names and
signatures, and every behaviour of SPEC §2 (ok, miss, unsupported kind, resolve
errors, unauthorized, malformed responses, timeouts) with the same return
values and log lines, for each pairing of the two as listener and client; the
reference's own FlashInfer seedable served and adopted through it, between two
Python processes and against a seedd daemon."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading

import pytest

import reference_seed
import seedd
import warmup_cache_ref
from conftest import HASH, TOKEN, frame, read_frame

IMPLS = {"reference": reference_seed, "seedd": seedd}
TABLE = {"_metadata": {"cuda": "12.8", "flashinfer": "0.2.5"},
         "gemm": {"128x256x64": [2, 1, 0]}}
FILENAME = "autotune_configs_dp0_rank0.json"


def put_table(root, table=TABLE, config_hash=HASH, filename=FILENAME):
    path = os.path.join(root, config_hash, filename)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(table, f)


def read_table(root, config_hash=HASH, filename=FILENAME):
    with open(os.path.join(root, config_hash, filename)) as f:
        return json.load(f)


def lines(logs, impl):
    """The impl's own log lines (logger names differ between the two)."""
    name = "seedd" if impl is seedd else "reference_seed"
    return logs(name)


@pytest.fixture(autouse=True)
def local_environment():
    # The FlashInfer environment of this "host": the table's _metadata matches it.
    warmup_cache_ref.install_flashinfer_metadata(TABLE["_metadata"])


def test_the_names_and_signatures_are_the_references():
    assert seedd.SeedConfig._fields == reference_seed.SeedConfig._fields
    assert seedd.SeedConfig._field_defaults == reference_seed.SeedConfig._field_defaults
    for name in ("__init__", "adopt", "handle_request", "request", "start_listener", "close"):
        ours = inspect.signature(getattr(seedd.SeedTransport, name))
        theirs = inspect.signature(getattr(reference_seed.SeedTransport, name))
        assert list(ours.parameters) == list(theirs.parameters), name
        assert [p.default for p in ours.parameters.values()] == [
            p.default for p in theirs.parameters.values()], name
    for name in ("request_params", "resolve", "validate_payload", "install"):
        assert list(inspect.signature(getattr(seedd.Seedable, name)).parameters) == list(
            inspect.signature(getattr(reference_seed.Seedable, name)).parameters)


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_a_listener_or_source_without_a_token_is_a_value_error(impl):
    for config in (impl.SeedConfig(listen=("127.0.0.1", 0)),
                   impl.SeedConfig(source=("127.0.0.1", 1), token="")):
        with pytest.raises(ValueError, match="A daemon-to-daemon listener/source requires a token"):
            impl.SeedTransport([], config)
    t = impl.SeedTransport([])
    assert t.start_listener() is None
    assert t.request({"kind": "x"}) is None  # no source: no response, no log
    t.close()


@pytest.fixture
def listener(tmp_path, request):
    """listener(impl) -> (host, port) of a transport serving a FlashInfer table."""
    made = []

    def _make(impl, seedables=None):
        root = tmp_path / f"source-{len(made)}"
        put_table(str(root))
        seedables = seedables or [warmup_cache_ref.FlashInferWarmupCache(str(root))]
        t = impl.SeedTransport(seedables, impl.SeedConfig(listen=("127.0.0.1", 0), token=TOKEN))
        made.append(t)
        return t.start_listener()

    yield _make
    for t in made:
        t.close()


PAIRS = [(s, c) for s in IMPLS for c in IMPLS]


@pytest.mark.parametrize("server,client", PAIRS, ids=[f"{s}-serves-{c}" for s, c in PAIRS])
def test_adopting_the_flashinfer_table(server, client, listener, tmp_path, logs):
    addr = listener(IMPLS[server])
    impl = IMPLS[client]
    target = tmp_path / "target"
    cache = warmup_cache_ref.FlashInferWarmupCache(str(target))
    t = impl.SeedTransport([cache], impl.SeedConfig(source=addr, token=TOKEN))
    assert t.adopt(cache, warmup_cache_ref.Runner(HASH)) is None
    assert read_table(str(target)) == TABLE
    assert lines(logs, impl) == [("INFO", "Adopted remote flashinfer_autotune seed")]
    assert ("INFO", f"Installed remote FlashInfer autotune table: flashinfer_autotune/{HASH}/"
            f"{FILENAME}") in logs("warmup_cache_ref")


def outcomes(impl, addr, tmp_path, logs):
    """Every SPEC §2 outcome a client sees from the listener at `addr`."""
    seen = {}
    t = impl.SeedTransport([], impl.SeedConfig(source=addr, token=TOKEN))
    key = {"kind": "flashinfer_autotune", "config_hash": HASH, "dp_rank": 0, "rank": 0}
    seen["ok"] = t.request(key)
    seen["miss"] = t.request(dict(key, rank=7))
    seen["unsupported"] = t.request({"kind": "nope"})
    seen["bad value"] = t.request(dict(key, config_hash="XYZ"))
    seen["missing field"] = t.request({"kind": "flashinfer_autotune", "config_hash": HASH})
    wrong = impl.SeedTransport([], impl.SeedConfig(source=addr, token="wrong-token"))
    seen["unauthorized"] = wrong.request(key)
    # Adopting a miss and a table this host's FlashInfer would refuse.
    cache = warmup_cache_ref.FlashInferWarmupCache(str(tmp_path / "adopted"))
    t.adopt(cache, warmup_cache_ref.Runner(HASH, rank=7))
    warmup_cache_ref.install_flashinfer_metadata({"cuda": "12.4", "flashinfer": "0.2.5"})
    t.adopt(cache, warmup_cache_ref.Runner(HASH))
    seen["logs"] = lines(logs, impl)
    return seen


@pytest.mark.parametrize("server,client", PAIRS, ids=[f"{s}-serves-{c}" for s, c in PAIRS])
def test_every_answer_and_log_line_is_the_references(server, client, listener, tmp_path, logs):
    seen = outcomes(IMPLS[client], listener(IMPLS[server]), tmp_path, logs)
    assert seen == {
        "ok": {"status": "ok", "payload": {FILENAME: TABLE}},
        "miss": {"status": "miss"},
        "unsupported": {"status": "error", "message": "unsupported seed kind"},
        "bad value": {"status": "error", "message": "invalid config_hash"},
        "missing field": {"status": "error", "message": "'dp_rank'"},
        "unauthorized": {"status": "error", "message": "Unauthorized request"},
        "logs": [
            ("INFO", "No remote flashinfer_autotune seed adopted (status miss); "
                     "using the local path"),
            ("WARNING", "Rejected the remote flashinfer_autotune seed; using the local path: "
                        "autotune table environment mismatch: cuda: remote=12.8 vs local=12.4"),
        ],
    }


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_handle_request_answers_as_the_reference(impl, tmp_path):
    put_table(str(tmp_path))
    t = impl.SeedTransport([warmup_cache_ref.FlashInferWarmupCache(str(tmp_path))])
    key = {"kind": "flashinfer_autotune", "config_hash": HASH, "dp_rank": 0, "rank": 0}
    assert t.handle_request(key) == {"status": "ok", "payload": {FILENAME: TABLE}}
    assert t.handle_request(dict(key, rank=3)) == {"status": "miss"}
    assert t.handle_request(["not", "an", "object"]) == {
        "status": "error", "message": "unsupported seed kind"}
    assert t.handle_request(dict(key, config_hash=1)) == {
        "status": "error", "message": "invalid config_hash"}


def transport_failures(impl, raw_server, monkeypatch, logs):
    """What a client logs for each way a source can fail it."""
    import socket

    # seedd keeps its deadlines in seedd._api, the reference in its module.
    monkeypatch.setattr(getattr(impl, "_api", impl), "_REQUEST_TIMEOUT_S", 1.0)
    results = {}

    def ask(addr):
        t = impl.SeedTransport([], impl.SeedConfig(source=addr, token=TOKEN))
        return t.request({"kind": "flashinfer_autotune"})

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
    results["refused"] = ask(closed.getsockname())
    closed.close()

    def answer(body):
        def reply(conn):
            read_frame(conn)
            conn.sendall(frame(body))
        return reply

    results["a list"] = ask(raw_server(answer(b"[1, 2]")).addr)
    results["not JSON"] = ask(raw_server(answer(b"{nope")).addr)
    results["silent"] = ask(raw_server(lambda conn: read_frame(conn)).addr)

    def cut(conn):
        read_frame(conn)
        conn.sendall(b"\x00\x00\x00\x00\x00\x00\x01\x00{")  # 256 bytes promised, 1 sent
        conn.close()

    results["cut"] = ask(raw_server(cut).addr)
    return results, lines(logs, impl)


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_a_failing_source_gives_no_response_and_the_references_warning(
        impl, raw_server, monkeypatch, logs):
    results, logged = transport_failures(impl, raw_server, monkeypatch, logs)
    assert results == {"refused": None, "a list": None, "not JSON": None, "silent": None,
                       "cut": None}
    assert [level for level, _ in logged] == ["WARNING"] * 5
    cannot = "Cannot fetch flashinfer_autotune from ('127.0.0.1', "
    assert logged[0][1].startswith(cannot)
    assert "over D2D; falling back locally: " in logged[0][1]
    assert logged[1][1].startswith("Source ('127.0.0.1', ")
    assert logged[1][1].endswith(
        ") sent a malformed response for flashinfer_autotune; falling back locally")
    for i in (2, 3, 4):  # not JSON, no answer within the timeout, a frame cut short
        assert logged[i][1].startswith(cannot), logged[i]


class Rendezvous:
    """A seedable whose resolve returns only once two requests are inside it at
    the same time: a listener that serves one at a time cannot answer it."""

    kind = "rendezvous"

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=10)

    def resolve(self, request):
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise ValueError("alone in resolve") from None
        return {"n": request["n"]}


def test_the_listener_serves_requests_at_once_and_the_client_waits_without_the_gil(listener):
    # Listener and clients in this one process: a resolve runs only if the
    # clients' threads wait for their answers without holding the GIL.
    addr = listener(seedd, [Rendezvous()])
    t = seedd.SeedTransport([], seedd.SeedConfig(source=addr, token=TOKEN))
    answers = [None, None]

    def ask(i):
        answers[i] = t.request({"kind": "rendezvous", "n": i})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert answers == [{"status": "ok", "payload": {"n": 0}}, {"status": "ok", "payload": {"n": 1}}]


def test_a_stalled_peer_does_not_hold_up_the_others(listener):
    import socket

    addr = listener(seedd)
    stalled = socket.create_connection(addr)
    stalled.sendall(b"\x00\x00")  # a frame begun, never finished
    t = seedd.SeedTransport([], seedd.SeedConfig(source=addr, token=TOKEN))
    # Answered while the stalled connection is still within its 5 s.
    answer = t.request({"kind": "flashinfer_autotune", "config_hash": HASH, "dp_rank": 0,
                        "rank": 0})
    assert answer["status"] == "ok"
    stalled.close()


def test_a_resolve_that_raises_something_else_is_an_error_answer_not_a_dead_listener(listener):
    class Broken:
        kind = "broken"

        def resolve(self, request):
            raise RuntimeError("the engine is gone")

    addr = listener(seedd, [Broken()])
    t = seedd.SeedTransport([], seedd.SeedConfig(source=addr, token=TOKEN))
    assert t.request({"kind": "broken"}) == {
        "status": "error", "message": "RuntimeError: the engine is gone"}
    assert t.request({"kind": "broken"})["status"] == "error"  # still serving


def test_a_payload_that_is_not_json_is_an_error_answer(listener):
    class Opaque:
        kind = "opaque"

        def resolve(self, request):
            return {"when": object()}

    addr = listener(seedd, [Opaque()])
    t = seedd.SeedTransport([], seedd.SeedConfig(source=addr, token=TOKEN))
    assert t.request({"kind": "opaque"}) == {
        "status": "error", "message": "Object of type object is not JSON serializable"}


@pytest.mark.parametrize("reference", [False, True], ids=["seedd", "reference"])
def test_between_two_python_processes(reference, start, tmp_path, logs):
    root = tmp_path / "source"
    put_table(str(root))
    argv = [sys.executable, os.path.join(os.path.dirname(__file__), "serve_flashinfer.py"),
            str(root)] + (["--reference"] if reference else [])
    peer = start(argv, env={"PYTHONPATH": os.pathsep.join(sys.path)})
    target = tmp_path / "target"
    cache = warmup_cache_ref.FlashInferWarmupCache(str(target))
    t = seedd.SeedTransport([cache], seedd.SeedConfig(source=peer.addr, token=TOKEN))
    t.adopt(cache, warmup_cache_ref.Runner(HASH))
    assert read_table(str(target)) == TABLE
    assert logs("seedd") == [("INFO", "Adopted remote flashinfer_autotune seed")]


def test_adopting_from_a_seedd_daemon_and_the_daemon_asking_python(
        start, seedd_bin, seedctl_bin, tmp_path, logs):
    cache_dir = tmp_path / "daemon"
    put_table(str(cache_dir / "flashinfer_autotune"))
    daemon = start([seedd_bin, "--listen", "127.0.0.1:0", "--cache-dir", str(cache_dir),
                    "--log-level", "warn"])
    target = tmp_path / "target"
    cache = warmup_cache_ref.FlashInferWarmupCache(str(target))
    t = seedd.SeedTransport([cache], seedd.SeedConfig(source=daemon.addr, token=TOKEN))
    t.adopt(cache, warmup_cache_ref.Runner(HASH))
    assert read_table(str(target)) == TABLE
    assert logs("seedd") == [("INFO", "Adopted remote flashinfer_autotune seed")]

    # And the other way: seedctl (the daemon's client) asks a Python listener.
    server = seedd.SeedTransport([warmup_cache_ref.FlashInferWarmupCache(str(target))],
                                 seedd.SeedConfig(listen=("127.0.0.1", 0), token=TOKEN))
    host, port = server.start_listener()
    try:
        r = subprocess.run(
            [seedctl_bin, "request", "--source", f"{host}:{port}", "--kind",
             "flashinfer_autotune", "--param", f"config_hash={HASH}", "--param", "dp_rank=0",
             "--param", "rank=0"],
            env=dict(os.environ, SEEDD_TOKEN=TOKEN), capture_output=True, text=True, timeout=30)
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"status": "ok", "payload": {FILENAME: TABLE}}
