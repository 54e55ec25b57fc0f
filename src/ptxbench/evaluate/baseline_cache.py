"""Vendor-baseline timings are measured once per (task, workload, GPU, library versions) and reused,
so evaluating many candidates of one task times the library once, not once per candidate."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from ptxbench._io import write_atomic

BASELINE_CACHE_VERSION = 4  # 2: measured in a process no candidate was loaded into; 3: call by call, as beside a
# candidate; 4: in chunks of at most CHUNK_MS, beside a clean process in the candidate's place, the median of
# CLEAN_SESSIONS measurements


class BaselineTiming(BaseModel):
    version: int = BASELINE_CACHE_VERSION
    key: dict[str, str]
    median_ms: float
    iqr_ms: float


class BaselineCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(task_hash: str, workload: str, variant: str, device: dict) -> dict[str, str]:
        return {"task": task_hash, "workload": workload, "variant": variant, "gpu": str(device.get("name")),
                "torch": str(device.get("torch")), "cuda": str(device.get("cuda")), "cudnn": str(device.get("cudnn"))}

    def _path(self, key: dict[str, str]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.root / f"{digest}.json"

    def get(self, key: dict[str, str]) -> BaselineTiming | None:
        path = self._path(key)
        if not path.is_file():
            return None
        record = BaselineTiming.model_validate_json(path.read_text())
        return record if record.version == BASELINE_CACHE_VERSION and record.key == key else None

    def put(self, key: dict[str, str], median_ms: float, iqr_ms: float) -> None:
        write_atomic(self._path(key), BaselineTiming(key=key, median_ms=median_ms, iqr_ms=iqr_ms).model_dump_json())
