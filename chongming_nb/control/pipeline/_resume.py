"""What ``submit(ctl, resume_from=run_id)`` starts from: the outputs an earlier run saved,
found in this process, the store's RunRecord or the manifest next to the outputs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._record import run_spec
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import STATUS

if TYPE_CHECKING:
    from chongming_nb.control.controller import Controller
    from chongming_nb.control.pipeline._state import RunState

__all__ = ["RUNS", "Previous", "artifacts_root", "file_name", "load_previous"]

log = logging.getLogger("chongming_nb.pipeline")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


@dataclass
class Previous:
    run_id: str
    outputs: dict[str, Path]  # node -> stored output (succeeded there)
    compensated: set[str]
    # sleep steps' wake times, and delayed steps' start times
    wakes: dict[str, datetime] = field(default_factory=dict)


def artifacts_root(ctl: Controller) -> Path:
    root = ctl.artifacts_root
    if root is None:
        return Path(tempfile.gettempdir()) / "chongming-artifacts"
    return Path(root)


def file_name(node: str, suffix: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", node)[:60]
    digest = hashlib.blake2b(node.encode("utf-8"), digest_size=4).hexdigest()
    return f"{safe}-{digest}{suffix}"


RUNS: weakref.WeakValueDictionary[str, RunState] = weakref.WeakValueDictionary()


def load_previous(ctl: Controller, run_id: str) -> Previous:
    """What an earlier run left: from this process, the store's RunRecord, or the
    manifest next to its outputs (all three are merged when present)."""
    outputs: dict[str, Path] = {}
    compensated: set[str] = set()
    wakes: dict[str, datetime] = {}
    found = False
    outputs_dir: Path | None = None
    mem = RUNS.get(run_id)
    if mem is not None:
        found = True
        with mem._lock:
            spec = run_spec(mem)
        outputs_dir = Path(spec["outputs_dir"]) if spec.get("outputs_dir") else None
        _merge_spec(spec, outputs, compensated, wakes)
    store = ctl.store
    if store is not None:
        try:
            rec = store.get_run(run_id)
        except Exception as exc:
            log.warning("could not read run %s from the store: %s", run_id, exc)
            rec = None
        if rec is not None:
            found = True
            spec = dict(rec.spec)
            if spec.get("outputs_dir"):
                outputs_dir = Path(spec["outputs_dir"])
            _merge_spec(spec, outputs, compensated, wakes)
    if outputs_dir is None:
        cand = artifacts_root(ctl) / "pipelines" / run_id
        if (cand / "manifest.jsonl").exists():
            outputs_dir = cand
    if outputs_dir is not None:
        manifest = outputs_dir / "manifest.jsonl"
        if manifest.exists():
            found = True
            for line in manifest.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    rec_line = json.loads(line)
                    if rec_line.get("event") == "succeeded":
                        outputs[rec_line["node"]] = Path(rec_line["output"])
                    elif rec_line.get("event") == "compensated":
                        compensated.add(rec_line["node"])
                    elif rec_line.get("event") == "sleep":
                        wakes[rec_line["node"]] = datetime.fromisoformat(rec_line["wake_at"])
                    elif rec_line.get("event") == "delayed":
                        wakes[rec_line["node"]] = datetime.fromisoformat(rec_line["start_at"])
    if not found:
        raise ConfigurationError(
            f"resume_from: unknown run {run_id!r} (not in this process, the store, or "
            f"{artifacts_root(ctl) / 'pipelines'})"
        )
    for n in compensated:
        outputs.pop(n, None)  # rolled back: its effects are gone, run it again
    return Previous(run_id, outputs, compensated, wakes)


def _merge_spec(
    spec: Mapping[str, Any],
    outputs: dict[str, Path],
    comp: set[str],
    wakes: dict[str, datetime],
) -> None:
    for n in spec.get("nodes", ()):
        if n.get("status") == S.SUCCEEDED.value and n.get("output"):
            outputs[n["name"]] = Path(n["output"])
    comp.update(spec.get("compensated", ()))
    for n, at in (spec.get("wakes") or {}).items():
        with contextlib.suppress(TypeError, ValueError):
            wakes[n] = datetime.fromisoformat(at)
