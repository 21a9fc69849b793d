"""Property tests: random DAGs of up to 100 nodes with random failures and join modes.

For every DAG: no deadlock (the run ends), no node runs twice, none starts before its
dependencies allow, and the outcome is exact — ALL_SETTLED: every node's status follows
from the DAG and the failure set alone; FAIL_FAST: nothing of the run starts after the
first failure, and every node is either run (succeeded/failed as designed) or cancelled
without an attempt (dependency_failed exactly when downstream of a failure)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chongming_nb import (
    AggregationPolicy,
    ConcurrencyPolicy,
    Controller,
    FailureKind,
    JoinMode,
    TaskStatus,
    TaskStatusChanged,
)
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus

S = TaskStatus
R = PipelineRunStatus


@dataclass
class Dag:
    deps: list[list[int]]
    joins: list[JoinMode]
    fail: set[int]


@st.composite
def dags(draw: Any, joins: bool) -> Dag:
    n = draw(st.one_of(st.integers(1, 100), st.integers(80, 100)))  # big ones too
    deps: list[list[int]] = []
    for i in range(n):
        if i == 0:
            deps.append([])
            continue
        ds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
        deps.append(sorted(ds))
    modes = (
        [draw(st.sampled_from(list(JoinMode))) for _ in range(n)]
        if joins
        else [JoinMode.ALL_SUCCEEDED] * n
    )
    fail = draw(st.sets(st.integers(0, n - 1), max_size=max(1, n // 8)))
    return Dag(deps, modes, fail)


class Probe:
    """What the task bodies saw, recorded under one lock."""

    def __init__(self, dag: Dag) -> None:
        self.dag = dag
        # a dependency that is cancelled never runs: all_done only waits for the others
        self.never = {i for i, s in enumerate(expected_all_settled(dag)) if s is S.CANCELLED}
        self.lock = threading.Lock()
        self.starts: dict[int, int] = {}
        self.finished: set[int] = set()  # body completed (returned or raised)
        self.succeeded: set[int] = set()
        self.violations: list[str] = []

    def body(self, ctx: Any, i: int) -> int:
        with self.lock:
            self.starts[i] = self.starts.get(i, 0) + 1
            deps = self.dag.deps[i]
            join = self.dag.joins[i]
            if join is JoinMode.ALL_SUCCEEDED and not all(d in self.succeeded for d in deps):
                self.violations.append(f"n{i} started before all of {deps} succeeded")
            if join is JoinMode.ALL_DONE and not all(
                d in self.finished for d in deps if d not in self.never
            ):
                self.violations.append(f"n{i} started before all of {deps} were done")
            if (
                join is JoinMode.ANY_SUCCEEDED
                and deps
                and not any(d in self.succeeded for d in deps)
            ):
                self.violations.append(f"n{i} started before any of {deps} succeeded")
        try:
            if i in self.dag.fail:
                raise RuntimeError(f"n{i} fails by design")
            with self.lock:
                self.succeeded.add(i)
            return i
        finally:
            with self.lock:
                self.finished.add(i)


def expected_all_settled(dag: Dag) -> list[TaskStatus]:
    out: list[TaskStatus] = []
    for i, deps in enumerate(dag.deps):
        ups = [out[d] for d in deps]
        join = dag.joins[i]
        if not deps or join is JoinMode.ALL_DONE:
            runs = True
        elif join is JoinMode.ALL_SUCCEEDED:
            runs = all(u is S.SUCCEEDED for u in ups)
        else:
            runs = any(u is S.SUCCEEDED for u in ups)
        out.append((S.FAILED if i in dag.fail else S.SUCCEEDED) if runs else S.CANCELLED)
    return out


def run_dag(dag: Dag, policy: AggregationPolicy) -> tuple[Any, Probe, Controller, list[Any]]:
    ctl = Controller(executor="thread", concurrency=ConcurrencyPolicy(max_parallel=4))
    events: list[TaskStatusChanged] = []
    ctl.watch(events.append, (TaskStatusChanged,))
    probe = Probe(dag)
    p = Pipeline("random", on_failure=policy, persist_outputs=False)
    nodes = []
    for i, deps in enumerate(dag.deps):
        nodes.append(
            p.add(probe.body, args=(i,), name=f"n{i}", deps=[nodes[d] for d in deps],
                  join=dag.joins[i])
        )  # fmt: skip
    run = p.submit(ctl)
    status = run.wait(60)  # no deadlock
    ctl.flush()
    return run, probe, ctl, events, status  # type: ignore[return-value]


def statuses(run: Any, ctl: Controller, n: int) -> list[TaskStatus]:
    return [ctl.get(run.handle(f"n{i}").id).status for i in range(n)]


SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(dags(joins=True))
def test_all_settled_is_exact(dag: Dag) -> None:
    run, probe, ctl, _events, status = run_dag(dag, AggregationPolicy.ALL_SETTLED)
    try:
        assert probe.violations == []
        assert all(v == 1 for v in probe.starts.values()), "a node ran twice"
        want = expected_all_settled(dag)
        got = statuses(run, ctl, len(dag.deps))
        assert got == want
        for i, s in enumerate(got):
            snap = ctl.get(run.handle(f"n{i}").id)
            if s is S.CANCELLED:
                assert snap.failure is not None
                assert snap.failure.kind is FailureKind.DEPENDENCY_FAILED
                assert i not in probe.starts
        ok = all(s in (S.SUCCEEDED, S.SKIPPED) for s in want)
        assert status is (R.SUCCEEDED if ok else R.FAILED)
    finally:
        ctl.close()


@SETTINGS
@given(dags(joins=False))
def test_fail_fast_is_exact(dag: Dag) -> None:
    run, probe, ctl, events, status = run_dag(dag, AggregationPolicy.FAIL_FAST)
    try:
        n = len(dag.deps)
        assert probe.violations == []
        assert all(v == 1 for v in probe.starts.values()), "a node ran twice"
        got = statuses(run, ctl, n)
        ids = {run.handle(f"n{i}").id: i for i in range(n)}
        # nothing of the run starts after the first failure
        mine = [e for e in events if e.task_id in ids]
        first_fail = next((k for k, e in enumerate(mine) if e.to_status is S.FAILED), len(mine))
        late = [ids[e.task_id] for e in mine[first_fail:] if e.to_status is S.STARTING]
        assert late == [], f"started after the first failure: {late}"
        failed = {i for i, s in enumerate(got) if s is S.FAILED}
        assert failed <= dag.fail
        first = ids[mine[first_fail].task_id] if failed else None

        def downstream(roots: set[int]) -> set[int]:
            out: set[int] = set()
            for i, deps in enumerate(dag.deps):
                if any(d in roots or d in out for d in deps):
                    out.add(i)
            return out

        # downstream of the first failure: dependency_failed; of a later failure (a node
        # that was already running): either, depending on which cancel came first; of
        # none: cancelled by fail-fast
        below_first = downstream({first}) if first is not None else set()
        below_any = downstream(failed)
        for i, s in enumerate(got):
            started = i in probe.starts
            if started:
                assert s is (S.FAILED if i in dag.fail else S.SUCCEEDED), (i, s)
            else:
                assert s is S.CANCELLED, (i, s)
                snap = ctl.get(run.handle(f"n{i}").id)
                assert snap.failure is not None
                if i in below_first:
                    assert snap.failure.kind is FailureKind.DEPENDENCY_FAILED, (i, snap.failure)
                elif i not in below_any:
                    assert snap.failure.kind is FailureKind.CANCELLED, (i, snap.failure)
                assert ctl.attempts(snap.task_id) == []
        if failed:
            assert status is R.FAILED
            assert run.summary()["first_failure"]["node"] in {f"n{i}" for i in failed}
        else:
            assert not (set(probe.starts) & dag.fail)
            assert got == [S.SUCCEEDED] * n
            assert status is R.SUCCEEDED
    finally:
        ctl.close()
