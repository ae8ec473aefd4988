"""The FlashInfer warmup cache's seedable, as the user's document gives it
(../shared/seeds/warmup_cache.txt: request_params, _runner_key, resolve,
validate_payload, install), with small stand-ins for the engine objects and
helpers it uses (a runner, the world group, the disk store, FlashInfer's
metadata classifier). The tests serve and adopt it through seedd.SeedTransport
unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import types
from typing import Any, Iterable

logger = logging.getLogger("warmup_cache_ref")

_CONFIG_HASH_RE = re.compile(r"[0-9a-f]{16,128}")


# --- stand-ins for what the engine provides --------------------------------

class DiskArtifactStore:
    """Files under <root>/<config_hash>/<filename> (the daemon's layout)."""

    def __init__(self, kind: str, root: str) -> None:
        self.kind = kind
        self.root = root

    def _path(self, key: str) -> str:
        _, config_hash, filename = key.split("/", 2)
        return os.path.join(self.root, config_hash, filename)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)


def artifact_key(kind: str, config_hash: str, filename: str) -> str:
    return f"{kind}/{config_hash}/{filename}"


def flashinfer_autotune_filename(dp_rank: Any, rank: Any) -> str:
    return f"autotune_configs_dp{dp_rank}_rank{rank}.json"


class Runner:
    """What request_params reads of a GPUModelRunner."""

    def __init__(self, config_hash: str, dp_rank: int = 0, rank: int = 0) -> None:
        self.config_hash = config_hash
        self.rank = rank
        self.vllm_config = types.SimpleNamespace(
            parallel_config=types.SimpleNamespace(data_parallel_rank=dp_rank))


_current_runner: Runner | None = None


def flashinfer_autotune_cache_hash(runner: Runner) -> str:
    global _current_runner
    _current_runner = runner
    return runner.config_hash


def get_world_group() -> Any:
    return types.SimpleNamespace(rank_in_group=_current_runner.rank if _current_runner else 0)


def install_flashinfer_metadata(local: dict[str, Any]) -> None:
    """A stand-in flashinfer.autotuner.autotuner whose environment is `local`:
    any differing key of a table's _metadata is a hard mismatch."""

    def _collect_metadata() -> dict[str, Any]:
        return dict(local)

    def _classify_metadata_mismatches(saved: dict[str, Any], now: dict[str, Any]):
        hard = {k: (saved.get(k), now.get(k)) for k in sorted(set(saved) | set(now))
                if saved.get(k) != now.get(k)}
        return hard, {}

    autotuner = types.ModuleType("flashinfer.autotuner.autotuner")
    autotuner._collect_metadata = _collect_metadata
    autotuner._classify_metadata_mismatches = _classify_metadata_mismatches
    sys.modules["flashinfer"] = types.ModuleType("flashinfer")
    sys.modules["flashinfer.autotuner"] = types.ModuleType("flashinfer.autotuner")
    sys.modules["flashinfer.autotuner.autotuner"] = autotuner


# --- the reference's seedable, its methods as given -------------------------

class FlashInferWarmupCache:
    """FlashInfer's per-rank autotune table (a single JSON file)."""

    kind = "flashinfer_autotune"

    def __init__(self, root: str, store_names: Iterable[str] = ()) -> None:
        self._store_names = tuple(store_names)
        self.store_sources = [DiskArtifactStore(self.kind, root)]

    def request_params(self, runner: "GPUModelRunner") -> dict[str, Any]:
        return {
            "config_hash": flashinfer_autotune_cache_hash(runner),
            "dp_rank": runner.vllm_config.parallel_config.data_parallel_rank,
            "rank": get_world_group().rank_in_group,
        }

    def _runner_key(self, runner: "GPUModelRunner") -> tuple[str, str]:
        """The (key, filename) naming this rank's table in every store."""
        params = self.request_params(runner)
        filename = flashinfer_autotune_filename(params["dp_rank"], params["rank"])
        key = artifact_key(self.kind, params["config_hash"], filename)
        return key, filename

    def resolve(self, request: dict[str, Any]) -> dict[str, Any] | None:
        config_hash = request.get("config_hash")
        if not isinstance(config_hash, str) or not _CONFIG_HASH_RE.fullmatch(
            config_hash
        ):
            raise ValueError("invalid config_hash")

        # Garbage ranks name a missing key; the hex check keeps us in the root.
        filename = flashinfer_autotune_filename(request["dp_rank"], request["rank"])
        key = artifact_key(self.kind, config_hash, filename)
        for store in self.store_sources:
            if (data := store.get(key)) is not None:
                return {filename: json.loads(data)}
        return None

    def validate_payload(self, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict) or len(payload) != 1:
            raise ValueError("expected exactly one autotune table")
        ((filename, table),) = payload.items()
        if not isinstance(table, dict):
            raise ValueError("autotune table must be a JSON object")
        if not filename.startswith("autotune_configs_"):
            raise ValueError(f"unexpected file {filename!r}")
        # Reject tables flashinfer would refuse to load; a mismatch never heals.
        saved_meta = table.get("_metadata")
        if saved_meta is None:
            # Pre-metadata flashinfer file; load_configs accepts these.
            return payload
        try:
            from flashinfer.autotuner.autotuner import (
                _classify_metadata_mismatches,
                _collect_metadata,
            )
        except ImportError:
            logger.warning(
                "flashinfer metadata classifier unavailable; "
                "accepting the remote autotune table unchecked"
            )
            return payload
        hard, soft = _classify_metadata_mismatches(saved_meta, _collect_metadata())
        mismatches = {**hard, **soft}
        if mismatches:
            details = ", ".join(
                f"{key}: remote={old} vs local={new}"
                for key, (old, new) in mismatches.items()
            )
            raise ValueError(f"autotune table environment mismatch: {details}")
        return payload

    def install(self, runner: "GPUModelRunner", payload: dict[str, Any]) -> None:
        (data,) = payload.values()
        key, _ = self._runner_key(runner)
        self.store_sources[0].put(key, json.dumps(data).encode())
        logger.info("Installed remote FlashInfer autotune table: %s", key)
