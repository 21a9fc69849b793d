"""A pipeline run whose kernel is killed (``kill -9``) mid-attempt: once recovery has
settled its tasks, the run's record in the store says what happened — ``lost``, with
the reason, its tasks' counts — not "running" forever; the sidebar's graph reads it so,
and ``resume_from=run_id`` goes on from the steps that succeeded. On SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipe_helpers import DEADLINE

import chongming_nb as cn
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.server.pictures import run_graph
from chongming_nb.stores import TaskQuery, TaskStore, open_store

R = PipelineRunStatus

# the child: extract (succeeds, output saved), then work (runs until killed), then load
CHILD = textwrap.dedent(
    """
    import sys, time
    import chongming_nb as cn

    def extract():
        return 21

    def work(ctx):
        while True:
            ctx.checkpoint()
            time.sleep(0.01)

    ctl = cn.Controller(store=sys.argv[1], artifacts_root=sys.argv[2])
    p = cn.Pipeline("nightly")
    e = p.add(extract, name="extract")
    w = p.add(work, name="work", deps=[e])
    p.add(lambda: 0, name="load", deps=[w])
    run = p.submit(ctl)
    print(run.id, flush=True)
    time.sleep(3600)
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the child's controller and ours keep their tasks (a path or a URL)."""
    if request.param == "sqlite":
        yield str(tmp_path / "tasks.db")
        return
    from tests.stores.conftest import drop_pg_schema

    url: str = request.getfixturevalue("postgres_url")
    schema = f"lost_{uuid.uuid4().hex[:12]}"
    yield f"{url}{'&' if '?' in url else '?'}schema={schema}"
    drop_pg_schema(url, schema)


def _working(store: TaskStore, arts: Path, run_id: str) -> bool:
    """Is the run's ``work`` step mid-attempt, with extract's success recorded (the
    run's manifest: what a resume restores)?"""
    manifest = arts / "pipelines" / run_id / "manifest.jsonl"
    if not manifest.exists():
        return False
    lines = [json.loads(ln) for ln in manifest.read_text().splitlines() if ln.strip()]
    if not any(ln.get("event") == "succeeded" and ln.get("node") == "extract" for ln in lines):
        return False
    snaps = {s.name: s for s in store.query(TaskQuery(pipeline_run_id=run_id))}
    return "work" in snaps and snaps["work"].status is S.RUNNING


def _kill_9_mid_attempt(target: str, arts: Path, tmp_path: Path) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), target, str(arts)], stdout=subprocess.PIPE, text=True
    )
    store = open_store(target)
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().strip()
        assert run_id.startswith("run-"), run_id
        deadline = time.monotonic() + DEADLINE
        while not _working(store, arts, run_id):  # another process: poll
            assert time.monotonic() < deadline, "the run's work step never started"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        rec = store.get_run(run_id)
        assert rec is not None and rec.status == R.RUNNING.value  # what the dead run left
    finally:
        store.close()
        if child.poll() is None:
            child.kill()
            child.wait(10)
    return run_id


def test_a_run_whose_kernel_was_killed_reads_lost_and_resumes(target: str, tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    run_id = _kill_9_mid_attempt(target, arts, tmp_path)

    ran: list[str] = []

    def extract() -> int:
        ran.append("extract")
        return 0

    def work(ctx: cn.TaskContext) -> int:
        ran.append("work")
        return int(ctx.upstream("extract")) * 2

    ctl = cn.Controller(store=target, artifacts_root=arts)
    try:
        report = ctl.reconcile("fail")
        assert report["runs"] == [run_id], report
        store = ctl.store
        assert store is not None
        snaps = {s.name: s for s in store.query(TaskQuery(pipeline_run_id=run_id))}
        assert snaps["work"].status is S.LOST and snaps["load"].status is S.CANCELLED
        rec = store.get_run(run_id)
        assert rec is not None
        assert rec.status == R.LOST.value, rec.status
        assert R.LOST.value in {s.value for s in R}
        why = rec.spec["recovery"]
        assert "is not running" in why["reason"], why  # the owner's pid is gone
        assert f"resume_from={run_id!r}" in why["reason"], why
        assert why["counts"] == {"succeeded": 1, "lost": 1, "cancelled": 1}, why
        # the record's nodes agree with their tasks
        nodes = {n["name"]: n["status"] for n in rec.spec["nodes"]}
        assert nodes == {"extract": "succeeded", "work": "lost", "load": "cancelled"}
        # what the sidebar's graph of the run says (GET runs/{id}/graph)
        graph = run_graph(rec, list(snaps.values()))
        assert graph["status"] == "lost" and graph["finished"] is True
        assert graph["reason"] == why["reason"]
        # settled once: a second reconcile leaves it be
        assert ctl.reconcile("fail")["runs"] == []

        p = Pipeline("nightly")
        e = p.add(extract, name="extract")
        w = p.add(work, name="work", deps=[e])
        p.add(lambda: 0, name="load", deps=[w])
        again = p.submit(ctl, resume_from=run_id)
        assert again.wait(DEADLINE) is R.SUCCEEDED, again.summary()["first_failure"]
        assert ran == ["work"], "a step that succeeded ran again"
        assert again.result("work") == 42  # extract's stored output fed it
        assert again.summary()["resumed_from"] == run_id
    finally:
        ctl.close()


def test_a_live_run_is_left_alone_by_another_reconciler(tmp_path: Path) -> None:
    """A run whose owner is alive (here, this process) is never settled by a reconciler
    of another controller: its record stays its own."""
    db = str(tmp_path / "tasks.db")
    ctl = cn.Controller(store=db, artifacts_root=tmp_path)
    other = cn.Controller(store=db)
    gate = threading.Event()
    try:
        p = Pipeline("live")
        p.add(lambda ctx: gate.wait(DEADLINE), name="wait")
        run = p.submit(ctl)
        assert other.reconcile("fail")["runs"] == []
        assert ctl.store is not None
        rec = ctl.store.get_run(run.id)
        assert rec is not None and rec.status == R.RUNNING.value
        gate.set()
        assert run.wait(DEADLINE) is R.SUCCEEDED
    finally:
        gate.set()
        other.close()
        ctl.close()
