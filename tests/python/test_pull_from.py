"""seedd.pull_from against a real OCI registry (Debian's docker-registry) with a
model pushed by seedctl: the files byte for byte with their upstream digests
checked, the version named, progress, and failures as seedd.Error with the
upstream's answer, nothing moved into the destination."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

import seedd
from conftest import BIN_DIR


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    """A docker-registry on a loopback port, its storage under tmp_path: HOST:PORT."""
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    assert os.path.exists(binary), "docker-registry is not installed (scripts/setup.sh test)"
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {tmp_path / 'storage'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "docker-registry exited"
                assert time.monotonic() < deadline, "docker-registry did not listen"
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def files_under(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def push(registry, tmp_path, tag):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "model.safetensors.bin").write_bytes(os.urandom(2 * 1024 * 1024 + 5))
    (src / "sub" / "config.json").write_text('{"layers": 2}')
    url = f"oci://{registry}/models/test:{tag}"
    subprocess.run([os.path.join(BIN_DIR, "seedctl"), "push", url, "--from", str(src)],
                   check=True, capture_output=True)
    return url, files_under(src)


def test_pull_from_a_registry_fetches_the_model_byte_for_byte_with_no_daemon(registry, tmp_path):
    url, model = push(registry, tmp_path, "v1")
    seen = []
    into = tmp_path / "engine" / "model"
    stats = seedd.pull_from(url, into, progress=seen.append)
    assert files_under(into) == model
    assert isinstance(stats, seedd.OriginPullStats)
    assert stats.source == url
    assert stats.into == str(into)
    assert stats.version.startswith("sha256:")
    assert stats.files == 2
    assert stats.total_bytes == sum(len(b) for b in model.values())
    assert stats.bytes_fetched == stats.total_bytes
    assert stats.files_unverified == 0
    assert seen and seen[-1]["verified_bytes"] == stats.total_bytes
    assert seen[-1]["sources"] == 1
    # Nothing is left beside the destination (the staging directory is gone).
    assert os.listdir(into.parent) == ["model"]


def test_pull_from_a_missing_tag_raises_not_found_naming_the_url(registry, tmp_path):
    url, _ = push(registry, tmp_path, "v1")
    into = tmp_path / "other"
    with pytest.raises(seedd.Error) as e:
        seedd.pull_from(url + "-missing", into)
    assert e.value.code == "NotFound"
    assert "/v2/models/test/manifests/v1-missing" in str(e.value)
    assert not into.exists()


def test_pull_from_into_a_directory_holding_files_needs_replace(registry, tmp_path):
    url, model = push(registry, tmp_path, "v1")
    into = tmp_path / "held"
    into.mkdir()
    (into / "old.bin").write_bytes(b"old")
    with pytest.raises(seedd.Error) as e:
        seedd.pull_from(url, into)
    assert e.value.code == "FailedPrecondition"
    assert files_under(into) == {"old.bin": b"old"}
    seedd.pull_from(url, into, replace=True)
    assert files_under(into) == model


def test_pull_from_refuses_what_is_not_an_upstream_url(tmp_path):
    with pytest.raises(ValueError, match="not an origin URL"):
        seedd.pull_from("llama", tmp_path / "x")
    with pytest.raises(ValueError, match="no repository"):
        seedd.pull_from("oci://127.0.0.1:1", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_pull_from_a_new_revision_over_the_old_fetches_only_what_changed(registry, tmp_path):
    url, model = push(registry, tmp_path, "v1")
    into = tmp_path / "engine"
    seedd.pull_from(url, into)
    # v2: the weights fine-tuned, the config the same.
    (tmp_path / "src" / "model.safetensors.bin").write_bytes(os.urandom(2 * 1024 * 1024 + 5))
    url2 = f"oci://{registry}/models/test:v2"
    subprocess.run([os.path.join(BIN_DIR, "seedctl"), "push", url2, "--from",
                    str(tmp_path / "src")], check=True, capture_output=True)
    stats = seedd.pull_from(url2, into, replace=True)
    assert files_under(into) == files_under(tmp_path / "src")
    assert stats.bytes_fetched == 2 * 1024 * 1024 + 5
    assert stats.bytes_reused == len(model["sub/config.json"])
