"""The store contract suite: every ``TaskStore`` backend must pass it.

It has no test-framework dependency. Give it a factory that returns a fresh, empty
store each time it is called (and optionally a ``dispose`` callable that cleans up
after one case, e.g. drops a PostgreSQL schema)::

    from chongming_nb.testing.store_contract import StoreContract

    contract = StoreContract(lambda: MyStore(...))
    contract.run_all()                     # raises AssertionError listing failed cases

    # or one pytest test per case:
    @pytest.mark.parametrize("case", StoreContract.cases())
    def test_my_store(case):
        StoreContract(make_store).run(case)

Each case opens its own store, exercises one promise of the protocol, and closes it.
Checks raise ``AssertionError`` with a message saying what was expected (they do not
use ``assert`` statements, so ``python -O`` does not disable them).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    CommandState,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import STATUS, RequestedAction, TaskStatus
from chongming_nb.stores.protocol import (
    DROPPED_STREAM,
    EventRecord,
    LogRecord,
    OwnerRecord,
    RunRecord,
    TaskQuery,
    TaskStore,
    Touch,
    log_size,
)

__all__ = ["T0", "StoreContract", "full_snapshot", "snap"]

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)
#: A fixed, aware start time for the cases.
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def snap(task_id: str, **kw: Any) -> TaskSnapshot:
    """A minimal snapshot (created at T0 unless given)."""
    kw.setdefault("name", f"name-{task_id}")
    kw.setdefault("created_at", T0)
    return TaskSnapshot(task_id=task_id, **kw)


def full_snapshot(task_id: str = "full") -> TaskSnapshot:
    """A snapshot with every field set to a non-default value."""
    return TaskSnapshot(
        task_id=task_id,
        name="extract «flights» <b>&",
        pipeline_run_id="run-1",
        tags=frozenset({"io", "nightly", "ü"}),
        status=S.STOPPING,
        status_version=7,
        requested_action=RequestedAction.STOP,
        attempt=2,
        max_attempts=5,
        created_at=at(0),
        queued_at=at(1),
        started_at=at(2.5),
        ended_at=at(99),
        last_heartbeat_at=at(3.000001),
        retry_at=at(4),
        progress=Progress(
            done=41.5, total=100, unit="rows", message="half way ✓", updated_at=at(3)
        ),
        failure=Failure(
            kind=FailureKind.TIMEOUT_IDLE,
            message="no heartbeat for 60s",
            traceback='Traceback (most recent call last):\n  File "x.py"\nValueError: 1',
            retryable=True,
            exit_code=-9,
            exception_type="builtins.ValueError",
        ),
        outcome={"rows": 336776, "ratio": 0.1, "nested": {"a": [1, 2.5, None, True, "s"]}},
        executor="process",
        pid=4242,
        priority=-3,
        deps=("a", "b", "c"),
        idempotency_key="flights-2013",
        bucket=17,
        bucket_key="tenant-9",
        lease_owner="host:1:kernel",
        lease_until=at(30),
        overridden=True,
    )


def transition(task_id: str, version: int, to: TaskStatus = S.QUEUED, **kw: Any) -> Transition:
    kw.setdefault("from_status", S.PENDING)
    kw.setdefault("trigger", "test")
    kw.setdefault("actor", "tester")
    kw.setdefault("reason", None)
    kw.setdefault("at", at(version))
    return Transition(task_id=task_id, to_status=to, version=version, **kw)


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)


def expect_eq(actual: Any, wanted: Any, what: str) -> None:
    if actual != wanted:
        raise AssertionError(f"{what}: expected {wanted!r}, got {actual!r}")


def expect_raises(exc_type: type[BaseException], fn: Callable[[], Any], what: str) -> Any:
    try:
        fn()
    except exc_type as exc:
        return exc
    except BaseException as exc:
        raise AssertionError(
            f"{what}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {exc_type.__name__}, nothing was raised")


def ids(snaps: list[TaskSnapshot]) -> list[str]:
    return [s.task_id for s in snaps]


class SnapshotCases:
    """Contract cases: create, get, save with an expected version, save_many as one transaction."""

    def case_identity(self, store: TaskStore) -> None:
        expect(isinstance(store.url, str) and bool(store.url), "url is a non-empty string")
        expect(store.schema_version >= 1, "schema_version >= 1")
        expect(isinstance(store, TaskStore), "implements the TaskStore protocol")

    def case_create_get_roundtrip(self, store: TaskStore) -> None:
        full = full_snapshot()
        store.create(full)
        expect_eq(store.get("full"), full, "get returns the created snapshot, every field")
        bare = TaskSnapshot(task_id="bare", name="")
        store.create(bare)
        expect_eq(store.get("bare"), bare, "a snapshot with defaults round-trips")
        expect(store.get("nope") is None, "get of an unknown id is None")

    def case_non_utc_times_keep_the_instant(self, store: TaskStore) -> None:
        tz = timezone(timedelta(hours=8))
        s = snap("tz", created_at=T0.astimezone(tz), started_at=at(5).astimezone(tz))
        store.create(s)
        got = store.get("tz")
        expect(got is not None, "stored")
        assert got is not None
        expect_eq(got.created_at, T0, "created_at is the same instant")
        expect_eq(got.started_at, at(5), "started_at is the same instant")
        expect(got.created_at is not None and got.created_at.utcoffset() == timedelta(0), "UTC")

    def case_naive_datetime_rejected(self, store: TaskStore) -> None:
        naive = datetime(2026, 1, 1, 12, 0)
        expect_raises(StoreError, lambda: store.create(snap("n", created_at=naive)), "naive")
        expect(store.get("n") is None, "nothing was written")
        expect_raises(
            StoreError,
            lambda: store.append(transition("n", 1, at=naive)),
            "naive transition time",
        )
        expect_eq(store.history("n"), [], "no history written")

    def case_create_duplicate_raises(self, store: TaskStore) -> None:
        first = snap("dup", name="first")
        store.create(first)
        exc = expect_raises(StoreError, lambda: store.create(snap("dup", name="second")), "dup")
        expect("dup" in str(exc), f"the error names the task id: {exc}")
        expect_eq(store.get("dup"), first, "the original is unchanged")

    def case_save_with_expected_version(self, store: TaskStore) -> None:
        s0 = snap("v")
        store.create(s0)
        s1 = s0.evolve(status=S.QUEUED, status_version=1)
        store.save(s1, expect_version=0)
        expect_eq(store.get("v"), s1, "saved")
        stale = s0.evolve(status=S.SKIPPED, status_version=1)
        exc = expect_raises(
            ConcurrencyConflict, lambda: store.save(stale, expect_version=0), "stale save"
        )
        expect_eq((exc.task_id, exc.expected, exc.actual), ("v", 0, 1), "conflict details")
        expect_eq(store.get("v"), s1, "a conflict changes nothing")
        exc = expect_raises(
            ConcurrencyConflict,
            lambda: store.save(snap("ghost", status_version=1), expect_version=0),
            "save of an unknown task",
        )
        expect_eq(exc.actual, None, "actual is None for an unknown task")
        expect(store.get("ghost") is None, "save does not create")

    def case_save_many_is_one_transaction(self, store: TaskStore) -> None:
        store.create(snap("a"))
        store.create(snap("b", status_version=5))
        a1 = snap("a", status=S.QUEUED, status_version=1)
        b_bad = snap("b", status=S.QUEUED, status_version=1)
        expect_raises(
            ConcurrencyConflict,
            lambda: store.save_many(
                [(a1, 0), (snap("c"), None), (b_bad, 0)],
                [transition("a", 1), transition("b", 1)],
                attempts=[AttemptRecord("a", 1, at(1))],
                events=[EventRecord("e1", "a", at(1), "x", {})],
            ),
            "batch with one conflict",
        )
        expect_eq(store.get("a"), snap("a"), "first item not written")
        expect(store.get("c") is None, "create in the failed batch not written")
        expect_eq(store.history("a"), [], "transitions not written")
        expect_eq(store.attempts("a"), [], "attempts not written")
        expect_eq(store.events("a"), [], "events not written")
        expect_raises(
            StoreError,
            lambda: store.save_many([(snap("d"), None), (snap("a"), None)], [transition("d", 1)]),
            "batch with a duplicate create",
        )
        expect(store.get("d") is None, "nothing of the duplicate batch written")
        expect_eq(store.history("d"), [], "nothing of the duplicate batch written (history)")

    def case_save_many_lands_together(self, store: TaskStore) -> None:
        n0 = snap("n")
        n1 = n0.evolve(status=S.QUEUED, status_version=1)
        n2 = n1.evolve(status=S.STARTING, status_version=2, attempt=1)
        store.save_many(
            [(n0, None), (n1, 0), (n2, 1)],
            [transition("n", 1), transition("n", 2, S.STARTING, from_status=S.QUEUED)],
            attempts=[AttemptRecord("n", 1, at(2), executor="thread")],
            events=[EventRecord("ev-n", "n", at(2), "attempt_started", {"attempt": 1})],
        )
        expect_eq(store.get("n"), n2, "the last version is stored")
        expect_eq([t.version for t in store.history("n")], [1, 2], "both transitions")
        expect_eq(store.attempts("n"), [AttemptRecord("n", 1, at(2), executor="thread")], "att")
        expect_eq(len(store.events("n")), 1, "event stored")
        store.save_many([])  # an empty batch is fine
        many = [(snap(f"m{i:03d}"), None) for i in range(300)]
        store.save_many(many)
        expect_eq(store.counts()[S.PENDING], 300, "a large batch lands")


class QueryCases:
    """Contract cases: query filters, keyset pages, counts, purge."""

    def _seed_query(self, store: TaskStore) -> None:
        # task id, name, status, tags, bucket, pipeline run, lease owner, created at
        rows = [
            ("t1", "load_a", S.RUNNING, {"io"}, 1, "r1", "o1", at(1)),
            ("t2", "load_b", S.FAILED, {"io", "x"}, 2, "r1", "o2", at(2)),
            ("t3", "Load_c", S.SUCCEEDED, set(), None, "r2", None, at(3)),
            ("t4", "lo%d_", S.QUEUED, {"x"}, 1, None, None, at(3)),
            ("t5", "undated", S.PENDING, set(), None, None, None, None),
        ]
        for task_id, name, status, tags, bucket, run, owner, created in rows:
            store.create(
                TaskSnapshot(
                    task_id=task_id,
                    name=name,
                    status=status,
                    tags=frozenset(tags),
                    bucket=bucket,
                    pipeline_run_id=run,
                    lease_owner=owner,
                    created_at=created,
                )
            )

    def case_page_walks_the_query_in_order(self, store: TaskStore) -> None:
        # ties in created_at, undated tasks, a filter: pages of 4 give query()'s rows
        for i in range(23):
            status = S.FAILED if i % 3 == 0 else S.SUCCEEDED
            created = None if i in (5, 17) else at(i // 3)
            store.create(snap(f"p{i:02d}", status=status).evolve(created_at=created))
        for order in ("newest", "oldest"):
            for status in (None, frozenset({S.SUCCEEDED})):
                q = TaskQuery(status=status, order=order)  # type: ignore[arg-type]
                walked: list[str] = []
                cursor: str | None = None
                pages = 0
                while True:
                    rows, cursor = store.page(replace(q, limit=4), after=cursor)
                    expect(len(rows) <= 4, "a page holds at most limit rows")
                    walked += ids(rows)
                    pages += 1
                    if cursor is None:
                        break
                expect_eq(walked, ids(store.query(q)), f"pages of {order}, status {status}")
                expect(pages == -(-len(walked) // 4), "no empty page before the end")
        first, cursor = store.page(TaskQuery(limit=5))
        store.create(snap("p-new", created_at=at(100)))  # newer than every page
        rest: list[str] = []
        while cursor is not None:
            rows, cursor = store.page(TaskQuery(limit=5), after=cursor)
            rest += ids(rows)
        expect("p-new" not in rest and not set(rest) & set(ids(first)), "no repeats")
        expect_eq(len(first) + len(rest), 23, "every row once while others are written")
        expect_eq(store.page(TaskQuery(limit=0)), ([], None), "limit=0: an empty last page")
        expect_raises(StoreError, lambda: store.page(after="not-a-cursor"), "bad cursor")

    def case_purge_deletes_old_finished_tasks_with_their_history(self, store: TaskStore) -> None:
        def task(tid: str, status: TaskStatus, ended: float | None) -> None:
            store.save_many(
                [(snap(tid, status=status, ended_at=None if ended is None else at(ended)), None)],
                [transition(tid, 1, at=at(0))],
                attempts=[AttemptRecord(tid, 1, at(0), None if ended is None else at(ended))],
                events=[EventRecord(f"e-{tid}", tid, at(0), "x", {})],
            )
            store.append_logs(tid, [LogRecord(at(0), "stdout", "hi")])
            store.submit_command(Command(f"c-{tid}", tid, "stop", {}, "me", at(0)))

        task("old-ok", S.SUCCEEDED, 10)
        task("old-failed", S.FAILED, 20)
        task("old-kept", S.SUCCEEDED, 10)
        task("new-ok", S.SUCCEEDED, 100)
        task("running", S.RUNNING, None)  # live: never purged, however old
        cut = at(50)
        dry = store.purge(older_than=cut, keep=frozenset({"old-kept"}), dry_run=True)
        expect_eq(dry["tasks"], 2, "dry run counts the old finished tasks")
        expect_eq(len(store.query()), 5, "a dry run deletes nothing")
        only = store.purge(older_than=cut, status=frozenset({S.FAILED}))
        expect_eq(only["tasks"], 1, "status narrows the purge")
        expect(store.get("old-failed") is None and store.get("old-ok") is not None, "failed only")
        got = store.purge(older_than=cut, keep=frozenset({"old-kept"}))
        expect_eq(
            got,
            {"transitions": 1, "attempts": 1, "events": 1, "logs": 1, "commands": 1, "tasks": 1},
            "one task's rows in every table",
        )
        expect_eq(sorted(ids(store.query())), ["new-ok", "old-kept", "running"], "left")
        expect(
            not store.history("old-ok")
            and not store.attempts("old-ok")
            and not store.logs("old-ok")
            and not store.events("old-ok")
            and not store.commands("old-ok"),
            "the history of a purged task is gone",
        )
        expect(bool(store.history("running")) and bool(store.logs("old-kept")), "others keep it")
        expect_raises(
            StoreError,
            lambda: store.purge(older_than=cut, status=frozenset({S.RUNNING})),
            "a live status is refused",
        )

    def case_query_filters(self, store: TaskStore) -> None:
        self._seed_query(store)
        expect_eq(ids(store.query()), ["t4", "t3", "t2", "t1", "t5"], "default order")
        expect_eq(
            ids(store.query(TaskQuery(order="oldest"))),
            ["t1", "t2", "t3", "t4", "t5"],
            "oldest first, undated last",
        )
        q = TaskQuery
        expect_eq(ids(store.query(q(status=frozenset({S.RUNNING, S.FAILED})))), ["t2", "t1"], "st")
        expect_eq(ids(store.query(q(status=frozenset())))[:1], [], "empty status set: nothing")
        expect_eq(ids(store.query(q(tag="io"))), ["t2", "t1"], "tag")
        expect_eq(ids(store.query(q(tag="i"))), [], "tag is exact, not a substring")
        expect_eq(ids(store.query(q(name_prefix="load_"))), ["t2", "t1"], "prefix, case")
        expect_eq(ids(store.query(q(name_prefix="lo%"))), ["t4"], "prefix: % is literal")
        expect_eq(ids(store.query(q(name_prefix="lo_"))), [], "prefix: _ is literal")
        expect_eq(ids(store.query(q(name_prefix=""))), ["t4", "t3", "t2", "t1", "t5"], "empty")
        expect_eq(ids(store.query(q(text="LOAD"))), ["t3", "t2", "t1"], "text: any case")
        expect_eq(ids(store.query(q(text="d_a"))), ["t1"], "text: inside the name")
        expect_eq(ids(store.query(q(text="%d"))), ["t4"], "text: % is literal")
        expect_eq(ids(store.query(q(text="T5"))), ["t5"], "text: the task id")
        expect_eq(
            store.counts(q(text="load"))[S.FAILED], 1, "counts with text: a GROUP BY of the matches"
        )
        expect_eq(ids(store.page(q(text="load", limit=2))[0]), ["t3", "t2"], "text: a page")
        expect_eq(ids(store.query(q(pipeline_run_id="r1"))), ["t2", "t1"], "run")
        expect_eq(ids(store.query(q(owner="o1"))), ["t1"], "owner")
        both = frozenset({"o1", "o2", "zz"})
        expect_eq(ids(store.query(q(owners=both))), ["t2", "t1"], "owners")
        expect_eq(ids(store.query(q(owners=frozenset()))), [], "owners: an empty set, no task")
        first, following = store.page(q(owners=both, limit=1))
        expect_eq(ids(first), ["t2"], "owners: a page")
        expect_eq(ids(store.page(q(owners=both, limit=1), after=following)[0]), ["t1"], "next")
        expect_eq(ids(store.query(q(buckets=frozenset({1})))), ["t4", "t1"], "buckets")
        expect_eq(ids(store.query(q(ids=frozenset({"t1", "t5", "zz"})))), ["t1", "t5"], "ids")
        expect_eq(ids(store.query(q(limit=2))), ["t4", "t3"], "limit")
        expect_eq(ids(store.query(q(limit=0))), [], "limit 0")
        expect_eq(
            ids(store.query(q(tag="x", buckets=frozenset({1}), name_prefix="lo"))),
            ["t4"],
            "criteria combine with AND",
        )
        many_ids = frozenset(f"m{i}" for i in range(2000)) | {"t3"}
        expect_eq(ids(store.query(q(ids=many_ids))), ["t3"], "a large id set works")

    def case_counts(self, store: TaskStore) -> None:
        empty = store.counts()
        expect_eq(set(empty), set(TaskStatus), "every status is a key")
        expect_eq(sum(empty.values()), 0, "empty store")
        self._seed_query(store)
        c = store.counts()
        expect_eq((c[S.RUNNING], c[S.FAILED], c[S.SUCCEEDED], c[S.PAUSED]), (1, 1, 1, 0), "c")
        expect_eq(sum(c.values()), 5, "total")
        c2 = store.counts(TaskQuery(pipeline_run_id="r1", limit=1))
        expect_eq(sum(c2.values()), 2, "counts honour filters, ignore limit")


class HistoryCases:
    """Contract cases: transitions, attempts, logs and their trimming, events, and the
    touch side channel."""

    def case_history_append_only_idempotent(self, store: TaskStore) -> None:
        store.append(transition("h", 2, S.STARTING, from_status=S.QUEUED))
        store.append(transition("h", 1))
        store.append(transition("h", 1, reason="a replay"))  # ignored: first wins
        store.append(transition("h", 3, S.RUNNING, from_status=S.STARTING, override=True))
        hist = store.history("h")
        expect_eq([t.version for t in hist], [1, 2, 3], "ascending by version")
        expect_eq(hist[0], transition("h", 1), "the first write of a version wins")
        expect_eq(hist[2].override, True, "override flag kept")
        expect_eq([t.version for t in store.history("h", since_version=1)], [2, 3], "since")
        expect_eq(store.history("other"), [], "unknown task: empty history")

    def case_histories_of_several_tasks_in_one_read(self, store: TaskStore) -> None:
        steps = [(S.QUEUED, S.PENDING), (S.STARTING, S.QUEUED), (S.RUNNING, S.STARTING)]
        steps += [(S.PAUSING, S.RUNNING), (S.PAUSED, S.PAUSING), (S.RUNNING, S.PAUSED)]
        for tid in ("p2", "p1"):
            for v, (to, frm) in enumerate(steps, 1):
                store.append(transition(tid, v, to, from_status=frm))
        store.append(transition("q", 1))
        got = store.histories(["p1", "q", "nobody", "p2", "p1"])
        expect_eq(sorted(got), ["p1", "p2", "q"], "every task with transitions, once")
        expect_eq(got["p1"], store.history("p1"), "each task's history, ascending by version")
        expect_eq(got["q"], store.history("q"), "a task of one transition")
        paused = store.histories(["p1", "q"], touching=frozenset({S.PAUSED}))
        expect_eq(sorted(paused), ["p1"], "only tasks with a transition touching PAUSED")
        expect_eq([t.version for t in paused["p1"]], [5, 6], "into and out of PAUSED")
        expect_eq(store.histories([]), {}, "no task: nothing read")

    def case_attempts(self, store: TaskStore) -> None:
        a1 = AttemptRecord("x", 1, at(1))
        store.save_attempt(AttemptRecord("x", 2, at(5)))
        store.save_attempt(a1)
        done = AttemptRecord(
            "x",
            1,
            at(1),
            ended_at=at(4),
            outcome=S.FAILED,
            failure_kind=FailureKind.EXCEPTION,
            failure_message="boom",
            traceback="tb",
            executor="thread",
            abandoned=True,
            exit_code=3,
        )
        store.save_attempt(done)
        got = store.attempts("x")
        expect_eq([a.attempt for a in got], [1, 2], "ascending, upserted")
        expect_eq(got[0], done, "upsert replaces the attempt, every field")
        expect_eq(store.clear_attempts("x"), 2, "clear returns the count")
        expect_eq(store.attempts("x"), [], "cleared")
        expect_eq(store.clear_attempts("x"), 0, "clearing again: 0")

    def case_logs(self, store: TaskStore) -> None:
        lines = [
            LogRecord(at(1), "stdout", "one"),
            LogRecord(at(1), "stdout", "one again (same instant)"),
            LogRecord(at(2), "stderr", "two\twith tab <b>"),
            LogRecord(at(3), "log", "three", level="WARNING"),
        ]
        store.append_logs("l", lines[:2])
        store.append_logs("l", lines[2:])
        store.append_logs("l", [])
        store.append_logs("other", [LogRecord(at(1), "stdout", "elsewhere")])
        expect_eq(store.logs("l"), lines, "oldest first, equal instants in append order")
        expect_eq(store.logs("l", limit=2), lines[2:], "limit keeps the newest")
        expect_eq(store.logs("l", since=at(1)), lines[2:], "since is strict")
        expect_eq(store.logs("l", since=at(1), limit=1), lines[3:], "since + limit")
        expect_eq(store.logs("none"), [], "unknown task")

    def case_trim_logs(self, store: TaskStore) -> None:
        line = "x" * 900  # each counts 1,900 against the budget (protocol.log_size)
        recs = [LogRecord(at(i), "stdout", f"{i:03d}{line[3:]}") for i in range(10)]
        store.append_logs("t", recs)
        store.append_logs("other", recs[:3])
        expect_eq(store.trim_logs("t", 100_000), 0, "within the budget: nothing dropped")
        expect_eq(store.trim_logs("t", 6_000), 7, "the 7 oldest lines dropped")
        marker = LogRecord(at(6), DROPPED_STREAM, "… 7 lines dropped")
        expect_eq(store.logs("t"), [marker, *recs[7:]], "a marker first, then the newest")
        store.append_logs("t", [LogRecord(at(20), "stdout", line)])
        expect_eq(store.trim_logs("t", 4_000), 2, "a second trim counts on")
        expect_eq(store.logs("t")[0].line, "… 9 lines dropped", "the marker says 9 in all")
        expect_eq(len(store.logs("t")), 3, "marker and the 2 newest")
        expect_eq(len(store.logs("other")), 3, "other tasks untouched")
        expect_eq(store.trim_logs("none", 10), 0, "unknown task")

    def case_trim_logs_byte_model(self, store: TaskStore) -> None:
        # one model for every store: a line counts 2 x its characters + 100 (log_size)
        size = log_size("é" * 450)
        expect_eq(size, 1_000, "log_size counts characters, twice, plus 100")
        recs = [LogRecord(at(i), "stdout", f"{i:02d}" + "é" * 448) for i in range(5)]
        store.append_logs("b", recs)
        expect_eq(store.trim_logs("b", 3 * size), 2, "exactly 3 lines' size keeps 3")
        expect_eq(store.trim_logs("b", 3 * size - 1), 1, "one byte less keeps 2")
        expect_eq(
            [r.line for r in store.logs("b")],
            ["… 3 lines dropped", recs[3].line, recs[4].line],
            "the marker, then the 2 newest",
        )
        expect_eq(store.trim_logs("b", 2 * size), 0, "the marker does not count")

    def case_events(self, store: TaskStore) -> None:
        e1 = EventRecord("e1", "a", at(1), "created", {"k": [1, 2]})
        e2 = EventRecord("e2", "b", at(2), "status", {"to": "queued"})
        e3 = EventRecord("e3", "a", at(3), "status", {"u": "ünï <x>", "f": 0.1})
        e4 = EventRecord("e4", None, at(4), "run", {})
        store.append_events([e1, e2])
        store.append_events([e3, e4, EventRecord("e1", "a", at(9), "dup", {})])
        expect_eq(store.events(), [e1, e2, e3, e4], "all, oldest first; dup id ignored")
        expect_eq(store.events("a"), [e1, e3], "by task")
        expect_eq(store.events(types=frozenset({"status"})), [e2, e3], "by type")
        expect_eq(store.events(since=at(2)), [e3, e4], "since")
        expect_eq(store.events(limit=2), [e3, e4], "limit keeps newest")
        expect_eq(store.events("a", types=frozenset({"status"}), since=at(0)), [e3], "combined")

    # ============================================================ side channel

    def case_touch_never_bumps_version(self, store: TaskStore) -> None:
        s = snap("t", status=S.RUNNING, status_version=3, started_at=at(1))
        store.create(s)
        p = Progress(done=5, total=10, unit="rows", message="m", updated_at=at(2))
        store.touch("t", progress=p, heartbeat_at=at(2), pid=77)
        got = store.get("t")
        assert got is not None
        expect_eq(got.status_version, 3, "version unchanged")
        expect_eq((got.progress, got.last_heartbeat_at, got.pid), (p, at(2), 77), "touched")
        store.touch("t", lease_owner="me", lease_until=at(60))
        got = store.get("t")
        assert got is not None
        expect_eq((got.lease_owner, got.lease_until, got.progress), ("me", at(60), p), "kept")
        store.touch("missing", heartbeat_at=at(3))  # ignored
        expect(store.get("missing") is None, "touch does not create")
        store.touch_many(
            [Touch("t", heartbeat_at=at(9)), Touch("missing", pid=1), Touch("t", pid=78)]
        )
        got = store.get("t")
        assert got is not None
        expect_eq((got.last_heartbeat_at, got.pid, got.status_version), (at(9), 78, 3), "many")
        store.save(
            got.evolve(status=S.SUCCEEDED, status_version=4, ended_at=at(10)), expect_version=3
        )
        expect_eq(store.get("t").status_version, 4, "a save after touches still works")  # type: ignore[union-attr]


class CommandCases:
    """Contract cases: the command queue and its claims, concurrent writers, owners and
    pipeline runs."""

    def case_commands_lifecycle(self, store: TaskStore) -> None:
        c1 = Command("c1", "t1", "stop", {"graceful": True}, actor="cli:me", created_at=at(0))
        c2 = Command("c2", "t2", "pause", {}, actor="ui", created_at=at(1))
        c3 = Command("c3", "t1", "resume", created_at=at(2))
        for c in (c1, c2, c3):
            store.submit_command(c)
        store.submit_command(Command("c1", "t9", "skip"))  # re-submit: ignored
        got = store.get_command("c1")
        assert got is not None
        expect_eq(
            (got.task_id, got.verb, dict(got.args), got.actor, got.state),
            ("t1", "stop", {"graceful": True}, "cli:me", CommandState.PENDING),
            "submitted as pending; a re-submit changes nothing",
        )
        expect(store.get_command("nope") is None, "unknown command: None")
        only_t1 = store.claim_commands(
            owner="k1", now=at(10), lease_seconds=30, task_ids=frozenset({"t1"})
        )
        expect_eq([c.command_id for c in only_t1], ["c1", "c3"], "task_ids filter, oldest first")
        expect(
            all(c.state is CommandState.CLAIMED and c.claimed_by == "k1" for c in only_t1),
            "claimed by k1",
        )
        expect_eq(only_t1[0].lease_until, at(40), "lease_until = now + lease")
        rest = store.claim_commands(owner="k2", now=at(11), lease_seconds=30)
        expect_eq([c.command_id for c in rest], ["c2"], "leased commands are not re-claimed")
        expect_eq(store.claim_commands(owner="k3", now=at(39.9), lease_seconds=5), [], "held")
        again = store.claim_commands(owner="k3", now=at(40), lease_seconds=5, limit=1)
        expect_eq([c.command_id for c in again], ["c1"], "expired lease re-claimed (limit 1)")
        store.complete_command("c1", now=at(41), outcome={"applied": True, "status": "stopping"})
        done = store.get_command("c1")
        assert done is not None
        expect_eq(
            (done.state, done.completed_at, dict(done.outcome or {})),
            (CommandState.DONE, at(41), {"applied": True, "status": "stopping"}),
            "completed",
        )
        store.complete_command("c1", now=at(50), outcome={"late": 1}, state=CommandState.REJECTED)
        expect_eq(store.get_command("c1"), done, "the first completion wins")
        store.complete_command(
            "c3", now=at(42), outcome={"error": "not paused"}, state=CommandState.REJECTED
        )
        expect_eq(store.get_command("c3").state, CommandState.REJECTED, "rejected")  # type: ignore[union-attr]
        late = store.claim_commands(owner="k4", now=at(1000), lease_seconds=5)
        expect_eq(
            [(c.command_id, c.claimed_by) for c in late],
            [("c2", "k4")],
            "completed commands are never claimed; an expired one is",
        )
        expect_raises(
            StoreError, lambda: store.complete_command("zz", now=at(1)), "complete unknown"
        )
        expect_eq([c.command_id for c in store.commands()], ["c1", "c2", "c3"], "listing")
        expect_eq([c.command_id for c in store.commands("t1")], ["c1", "c3"], "by task")
        expect_eq(
            [c.command_id for c in store.commands(state=CommandState.DONE)], ["c1"], "by state"
        )
        expect_eq(store.claim_commands(owner="k5", now=at(0), lease_seconds=1, limit=0), [], "0")

    def case_claims_are_exclusive_across_threads(self, store: TaskStore) -> None:
        n = 120
        for i in range(n):
            store.submit_command(Command(f"cmd{i:04d}", f"t{i % 7}", "stop", created_at=at(i)))
        claimed: dict[str, list[str]] = {}
        lock = threading.Lock()
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def worker(name: str) -> None:
            try:
                start.wait()
                while True:
                    got = store.claim_commands(owner=name, now=at(500), lease_seconds=600, limit=7)
                    if not got:
                        return
                    with lock:
                        for c in got:
                            claimed.setdefault(c.command_id, []).append(name)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        expect(not errors, f"no claimer failed: {errors!r}")
        expect_eq(len(claimed), n, "every command claimed")
        dupes = {k: v for k, v in claimed.items() if len(v) != 1}
        expect(not dupes, f"no command claimed twice: {dupes}")

    def case_concurrent_writers(self, store: TaskStore) -> None:
        errors: list[BaseException] = []

        def writer(k: int) -> None:
            try:
                for i in range(25):
                    tid = f"w{k}-{i}"
                    s0 = snap(tid)
                    store.create(s0)
                    s1 = s0.evolve(status=S.QUEUED, status_version=1)
                    store.save_many([(s1, 0)], [transition(tid, 1)])
                    store.touch(tid, heartbeat_at=at(i))
                    store.append_logs(tid, [LogRecord(at(i), "stdout", f"line {i}")])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        expect(not errors, f"no writer failed: {errors!r}")
        expect_eq(store.counts()[S.QUEUED], 100, "all saves landed")
        expect_eq(len(store.history("w3-24")), 1, "history landed")

    # ============================================================= owners, runs

    def case_owners(self, store: TaskStore) -> None:
        o1 = OwnerRecord("host:2:k", "host", 2, "k", at(0), at(1))
        o0 = OwnerRecord("host:1:-", "host", 1, None, at(0), at(0))
        store.upsert_owner(o1)
        store.upsert_owner(o0)
        o1b = OwnerRecord("host:2:k", "host", 2, "k", at(0), at(99))
        store.upsert_owner(o1b)
        expect_eq(store.owners(), [o0, o1b], "ordered by owner_id, upserted")

    def case_runs(self, store: TaskStore) -> None:
        r1 = RunRecord("r1", "nightly", "running", at(1), at(1), {"nodes": ["a", "b"], "n": 2})
        r2 = RunRecord("r2", "hourly", "succeeded", at(2), at(3), {})
        store.save_run(r1)
        store.save_run(r2)
        r1b = RunRecord("r1", "nightly", "failed", at(1), at(9), {"nodes": ["a", "b"], "n": 2})
        store.save_run(r1b)
        expect_eq(store.get_run("r1"), r1b, "upserted")
        expect(store.get_run("zz") is None, "unknown run: None")
        expect_eq([r.run_id for r in store.list_runs()], ["r2", "r1"], "newest first")
        expect_eq([r.run_id for r in store.list_runs(limit=1)], ["r2"], "limit")
        store.save_run(RunRecord("r3", "hourly", "running", at(4), at(5), {}))
        expect_eq(
            [r.run_id for r in store.list_runs(status={"running", "failed"})],
            ["r3", "r1"],
            "status: the runs in one of these statuses, newest first",
        )
        expect_eq([r.run_id for r in store.list_runs(status=["paused"])], [], "status: none")
        expect_eq(store.list_runs(status=()), [], "status: an empty choice")
        expect_eq([r.run_id for r in store.list_runs(1, status={"running"})], ["r3"], "both")


class OperationCases:
    """Contract cases: pruning, JSON fidelity, close."""

    def case_prune_keeps_history(self, store: TaskStore) -> None:
        terminal = [S.SUCCEEDED, S.FAILED, S.STOPPED, S.CANCELLED, S.SKIPPED, S.LOST]
        for i, st in enumerate(terminal):
            tid = f"done{i}"
            store.create(snap(tid, status=st, status_version=1, created_at=at(i), ended_at=at(i)))
            store.append(transition(tid, 1, st))
            store.save_attempt(AttemptRecord(tid, 1, at(i), ended_at=at(i), outcome=st))
            store.append_logs(tid, [LogRecord(at(i), "stdout", "bye")])
        store.create(snap("old-running", status=S.RUNNING, created_at=at(-100)))
        expect_eq(store.prune(keep_terminal=10), 0, "nothing beyond the limit")
        expect_eq(store.prune(keep_terminal=2), 4, "four oldest terminal deleted")
        left = set(ids(store.query()))
        expect_eq(left, {"done4", "done5", "old-running"}, "the newest terminal and live kept")
        expect(store.get("done0") is None, "a pruned snapshot is gone")
        expect_eq(len(store.history("done0")), 1, "its history stays queryable")
        expect_eq(len(store.attempts("done0")), 1, "its attempts stay")
        expect_eq(len(store.logs("done0")), 1, "its logs stay")
        expect_eq(store.prune(keep_terminal=0), 2, "keep 0 removes all terminal")
        expect_eq(ids(store.query()), ["old-running"], "non-terminal never pruned")

    def case_json_fidelity(self, store: TaskStore) -> None:
        outcome = {
            "float": 0.1 + 0.2,
            "big": 2**53 + 1,
            "neg": -0.0,
            "exp": 1e300,
            "text": 'line\nbreak "quoted" 中文 \U0001f600',
            "order": {"z": 1, "a": 2},
            "empty": {},
            "list": [],
        }
        store.create(snap("j", outcome=outcome))
        got = store.get("j")
        assert got is not None
        expect_eq(dict(got.outcome or {}), outcome, "outcome JSON round-trips")
        expect_eq(list((got.outcome or {})["order"]), ["z", "a"], "key order kept")
        expect(math.copysign(1, got.outcome["neg"]) < 0, "-0.0 kept")  # type: ignore[index]
        nan = snap("nan", progress=Progress(done=math.inf, total=None))
        store.create(nan)
        got_nan = store.get("nan")
        assert got_nan is not None and got_nan.progress is not None
        expect_eq(got_nan.progress.done, math.inf, "infinity kept")

    def case_close(self, store: TaskStore) -> None:
        store.create(snap("c"))
        store.close()
        store.close()  # idempotent
        expect_raises(StoreError, lambda: store.get("c"), "use after close")


class StoreContract(SnapshotCases, QueryCases, HistoryCases, CommandCases, OperationCases):
    """The contract cases (one base class per concern). ``cases()`` lists them;
    ``run(name)`` runs one, ``run_all()`` every one."""

    def __init__(
        self,
        factory: Callable[[], TaskStore],
        dispose: Callable[[TaskStore], None] | None = None,
    ) -> None:
        self.factory = factory
        self.dispose = dispose

    @classmethod
    def cases(cls) -> list[str]:
        return sorted(n for n in dir(cls) if n.startswith("case_"))

    def run(self, name: str) -> None:
        if name not in self.cases():
            raise ValueError(f"no contract case {name!r}")
        store = self.factory()
        try:
            getattr(self, name)(store)
        finally:
            try:
                store.close()
            finally:
                if self.dispose is not None:
                    self.dispose(store)

    def run_all(self) -> None:
        failures: list[str] = []
        for name in self.cases():
            try:
                self.run(name)
            except Exception as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
        if failures:
            raise AssertionError(
                f"{len(failures)} store contract case(s) failed:\n" + "\n".join(failures)
            )
