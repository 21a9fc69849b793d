"""Dependencies: when a BLOCKED task is released, skipped or cancelled, and what its
upstreams hand it.

Owns no state of its own: it reads and writes ``TaskEntry.deps``, ``dependants``,
``join``, ``when`` and ``upstream`` (under ``TaskBook.lock``), and queues released
tasks through admission.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from chongming_nb.control.admission import Admission
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.timers import TimerKind, TimerQueue
from chongming_nb.core.models import FailureKind
from chongming_nb.core.policies import JoinMode
from chongming_nb.core.states import STATUS, TERMINAL, TaskStatus

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: Terminal states other than success: an upstream in one fails an all_succeeded join.
_UNSUCCESSFUL = TERMINAL - {TaskStatus.SUCCEEDED}


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Dependencies:
    book: TaskBook
    admission: Admission
    timers: TimerQueue  # a delayed start (delay= / not_before=) arms one

    def link(self, t: TaskEntry) -> None:
        """Under the lock: record ``t`` as a dependant of each of its upstreams."""
        tasks = self.book.tasks
        task_id = t.snap.task_id
        for d in t.deps:
            up = tasks.get(d)
            if up is None:  # finished and out of memory: it changes no more
                continue
            if up.dependants is None:
                up.dependants = [task_id]
            else:
                up.dependants.append(task_id)

    def settle(self, ids: list[str]) -> None:
        """Re-evaluate BLOCKED tasks in ``ids`` (and, transitively, what they unblock)."""
        book = self.book
        tasks = book.tasks
        work = deque(ids)  # FIFO: dependants are released in the order they were submitted
        status_of = book.status_of
        while work:
            t = tasks.get(work.popleft())
            if t is None or t.snap.status is not S.BLOCKED:
                continue
            ups = [status_of(d) for d in t.deps]
            if t.join is JoinMode.ALL_SUCCEEDED:
                if all(s is S.SUCCEEDED for s in ups):
                    self.release(t)  # the common case: every upstream succeeded
                    if t.snap.status in TERMINAL:
                        work.extend(t.dependants or ())
                    continue
                bad = [d for d, s in zip(t.deps, ups, strict=True) if s in _UNSUCCESSFUL]
                if bad:
                    names = ", ".join(f"{self._name(d)} ({status_of(d)})" for d in bad)
                    book.apply(
                        t,
                        book.sm.cancel(
                            t.snap,
                            reason=f"upstream did not succeed: {names}",
                            kind=FailureKind.DEPENDENCY_FAILED,
                        ),
                    )
                    work.extend(t.dependants or ())
                    continue
                ready = False  # some upstream is still open
            elif t.join is JoinMode.ALL_DONE:
                ready = all(s in TERMINAL for s in ups)
            else:  # ANY_SUCCEEDED
                ready = any(s is S.SUCCEEDED for s in ups)
                if not ready and all(s in TERMINAL for s in ups):
                    book.apply(
                        t,
                        book.sm.cancel(
                            t.snap,
                            reason="no upstream succeeded",
                            kind=FailureKind.DEPENDENCY_FAILED,
                        ),
                    )
                    work.extend(t.dependants or ())
                    continue
            if ready:
                self.release(t)
                if t.snap.status in TERMINAL:
                    work.extend(t.dependants or ())

    def after_status(self, t: TaskEntry) -> None:
        """Under the lock, after a status change: run holds, then dependants."""
        self.admission.note_status(t)
        if t.dependants and t.snap.status in TERMINAL:
            self.settle(list(t.dependants))

    def release(self, t: TaskEntry, now: datetime | None = None) -> None:
        """Dependencies are met: inject upstream results, test ``when``, queue. A
        delayed start whose time has not come stays BLOCKED; its timer releases it."""
        book = self.book
        start_at = t.snap.retry_at  # a delayed start (only a waiting task has one)
        if start_at is not None and t.snap.status is S.BLOCKED:
            wait = (start_at - book.clock.now()).total_seconds()
            if wait > 0:
                deadline = book.clock.monotonic() + wait
                self.timers.push(deadline, TimerKind.START, t.snap.task_id, t.snap.status_version)
                return
        if t.deps:
            values = self._upstream_map(t)
            names = (t.upstream or {}).get("__names__", {})
            t.upstream = {"__names__": names, **values}
            if t.when is not None:
                try:
                    go = bool(t.when(UpstreamView(self, t)))
                except Exception as exc:
                    book.apply(
                        t,
                        book.sm.cancel(
                            t.snap,
                            reason=f"when= raised {type(exc).__name__}: {exc}",
                            kind=FailureKind.EXCEPTION,
                        ),
                    )
                    return
                if not go:
                    book.apply(
                        t,
                        book.sm.skip(
                            t.snap,
                            reason="when= condition is false",
                            actor="orchestrator",
                            kind=FailureKind.CONDITION_FALSE,
                        ),
                    )
                    return
        book.apply(t, book.sm.mark_queued(t.snap, now=now))
        self.admission.enqueue(t)

    def _upstream_map(self, t: TaskEntry) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tasks = self.book.tasks
        for d in t.deps:
            u = tasks.get(d)  # an evicted upstream's result is not kept
            if u is not None and u.snap.status is S.SUCCEEDED:
                out[d] = u.result
        return out

    def upstream_value(self, t: TaskEntry, key: object) -> Any:
        """What ``ctx.upstream(key)`` returns: a succeeded upstream's result, by
        handle, task id, node or task name."""
        with self.book.lock:
            tasks = self.book.tasks
            ups = t.upstream or {}
            tid = getattr(key, "id", None) or getattr(key, "task_id", None) or key
            if isinstance(tid, str) and tid in ups and tid != "__names__":
                return ups[tid]
            names: dict[str, str] = ups.get("__names__", {})
            node = getattr(key, "name", None) if not isinstance(key, str) else key
            if isinstance(node, str):
                if node in names and names[node] in ups:
                    return ups[names[node]]
                for d in t.deps:
                    if self._name(d) == node and d in ups:
                        return ups[d]
            known = [self._name(d) for d in t.deps]
            gone = [d for d in t.deps if d not in tasks and d not in ups]
            why = (
                f"; the results of {', '.join(gone)} are not kept: they finished and left "
                "the controller's memory before this task was submitted "
                "(HistoryLimits(memory_finished_tasks=...))"
                if gone
                else ""
            )
            raise KeyError(
                f"{key!r} is not a succeeded upstream of {t.snap.name!r} (upstreams: {known}){why}"
            )

    def upstream_payload(self, t: TaskEntry) -> dict[str, Any] | None:
        """Upstream values and names for executors that run the task elsewhere."""
        if not t.deps:
            return None
        ups = dict(t.upstream or {})
        names = dict(ups.get("__names__", {}))
        for d in t.deps:
            names.setdefault(self._name(d), d)
        ups["__names__"] = names
        return ups

    def _name(self, task_id: str) -> str:
        """Under the lock: an upstream's name (its id once it left memory)."""
        t = self.book.tasks.get(task_id)
        return t.snap.name if t is not None else task_id


class UpstreamView(Mapping[Any, Any]):
    """What ``when=`` sees: upstream results by handle, node, name or id."""

    def __init__(self, deps: Dependencies, t: TaskEntry) -> None:
        self._deps = deps
        self._t = t

    def __getitem__(self, key: Any) -> Any:
        return self._deps.upstream_value(self._t, key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._t.deps)

    def __len__(self) -> int:
        return len(self._t.deps)
