"""Intake: a submitted call becomes a task.

Owns the task-id sequence, the idempotency keys (key -> task id) and the registry of
task functions by name (``reconcile(requeue)`` runs a task again by it). Everything is
validated before anything is recorded: a bad submit raises and changes nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from chongming_nb.control.admission import Admission
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.launcher import Launcher
from chongming_nb.control.messages import KeepRecord
from chongming_nb.control.spec import (
    TaskRegistry,
    TaskSpec,
    _validate,
    check_arguments,
    check_start,
    submit_facts,
)
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import TaskCreated
from chongming_nb.core.models import submitted_snapshot
from chongming_nb.core.policies import JoinMode, RetryPolicy, Timeout
from chongming_nb.core.validation import check_same_call, check_text
from chongming_nb.runtime.executors import Executor
from chongming_nb.stores.protocol import EventRecord

#: ``submit(after=)``'s default: no dependencies.
NO_DEPS: tuple[Any, ...] = ()


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Intake:
    book: TaskBook
    admission: Admission
    deps: Dependencies
    launcher: Launcher
    owner: str | None
    #: how long the lease a new task starts with lasts (None: no store, no lease)
    lease: timedelta | None
    registry: TaskRegistry = dataclasses.field(init=False, default_factory=TaskRegistry)
    #: idempotency key -> task id
    by_key: dict[str, str] = dataclasses.field(init=False, default_factory=dict)
    _task_seq: Iterator[int] = dataclasses.field(
        init=False, default_factory=lambda: itertools.count(1)
    )

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        after: Iterable[object] | object = NO_DEPS,
        name: str | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        retry: RetryPolicy | int | None = None,
        timeout: Timeout | float | None = None,
        executor: str | Executor | None = None,
        idempotency_key: str | None = None,
        bucket_key: str | None = None,
        pipeline_run_id: str | None = None,
        join: JoinMode = JoinMode.ALL_SUCCEEDED,
        when: Callable[[Mapping[str, Any]], bool] | None = None,
        node: str | None = None,
        compensate: Callable[..., Any] | None = None,
        upstream_names: Mapping[str, str] | None = None,
        prepared: tuple[TaskSpec, bool] | None = None,
        start: tuple[float | None, datetime | None] | None = None,
    ) -> str:
        """The new task's id (or the id an idempotency key already names).

        ``prepared``: ``(final spec, inject)`` from a caller that has already validated
        the spec and bound the arguments (pipelines do it once per node at ``add``).
        ``start``: this call's ``(delay, not_before)``, which win over the spec's."""
        book = self.book
        if not callable(fn):
            raise ConfigurationError(f"submit() needs a callable, got {fn!r}")
        if book.closed:
            raise ConfigurationError("this controller is closed")
        arity: int | None = None
        if prepared is not None:
            spec, inject = prepared
        else:
            spec, inject, arity = submit_facts(fn)
        if prepared is None and (
            name is not None
            or retry is not None
            or timeout is not None
            or tags is not None
            or priority is not None
            or compensate is not None
            or executor is not None
        ):
            spec = spec.merged(
                **_validate(name, retry, timeout, tags, priority, compensate), executor=executor
            )
        timing = check_start(*start) if start is not None else None
        if idempotency_key is not None:
            check_text("idempotency_key", idempotency_key, empty=True)
        if bucket_key is not None:
            check_text("bucket_key", bucket_key, empty=True)
        if prepared is None and (kwargs or len(args) + inject != arity):
            check_arguments(fn, args, kwargs, inject)  # (else: plain and complete)
        ups: Iterable[object]
        if after is None or after is NO_DEPS:
            ups = NO_DEPS
        elif isinstance(after, str) or not isinstance(after, Iterable):
            ups = (after,)
        else:
            ups = after
        exec_name, ex = self.launcher.executor_for(spec.executor)
        validate = getattr(ex, "validate", None)
        if callable(validate):  # e.g. the process executor: picklable, importable target
            validate(fn, tuple(args), dict(kwargs))
        self.registry.register(fn, spec.name)
        admission = self.admission
        prio = (
            spec.priority if spec.priority is not None else admission.concurrency.default_priority
        )
        bucket = admission.bucket_for(bucket_key)
        with book.lock:
            if idempotency_key is not None and idempotency_key in self.by_key:
                first_id = self.by_key[idempotency_key]
                first = book.tasks.get(first_id)
                if first is None:  # finished and left memory: its call is not kept
                    return first_id
                check_same_call(
                    idempotency_key,
                    first_id,
                    (first.fn, first.args, first.kwargs, first.inject),
                    fn,
                    tuple(args),
                    kwargs,
                )
                return first_id
            tasks = book.tasks
            deps: list[str] = []
            for d in ups:
                tid = getattr(d, "id", d)
                if not isinstance(tid, str) or book.status_of(tid) is None:
                    raise ConfigurationError(f"after=: unknown task {tid!r}")
                if tid not in deps:
                    deps.append(tid)
            # this controller's random prefix + a sequence: unique across controllers
            # sharing a store (32 random bits apart), and one controller's ids sort in
            # creation order, so a store's task_id indexes grow at one end instead of
            # at random pages (~3x fewer pages written per task with SQLite)
            task_id = f"{book.id_prefix}{next(self._task_seq):06x}"
            while task_id in tasks:  # only after a reconcile adopted foreign ids
                task_id = f"{book.id_prefix}{next(self._task_seq):06x}"
            now = book.clock.now()
            dep_ids = tuple(deps)
            snap = submitted_snapshot(  # the values of SUBMIT_FIELDS, in that order
                task_id,
                spec.name,
                pipeline_run_id,
                spec.tags,
                spec.retry.max_attempts,
                now,
                exec_name,
                prio,
                dep_ids,
                idempotency_key,
                bucket,
                bucket_key,
                self.owner,
                None if self.lease is None else now + self.lease,
            )
            start_at = _start_at(spec, timing, now)
            t = TaskEntry(snap, fn, tuple(args), dict(kwargs), inject, spec, spec.executor, dep_ids)
            if join is not JoinMode.ALL_SUCCEEDED:
                t.join = join
            if when is not None:
                t.when = when
            if node is not None:
                t.node = node
            if upstream_names:
                t.upstream = {"__names__": dict(upstream_names)}
            tasks[task_id] = t
            if idempotency_key is not None:
                self.by_key[idempotency_key] = task_id
            self.deps.link(t)
            if book.store is not None:
                book.created(snap)
                call = recorded_call(task_id, now, args, kwargs)
                if call is not None:
                    book.outbox.append(call)
            if book.bus.listened:
                book.outbox.append(
                    TaskCreated(
                        event_id=book.new_event_id(), at=now, task_id=task_id, snapshot=snap
                    )
                )
            if deps:
                book.apply(
                    t,
                    book.sm.mark_blocked(
                        t.snap, reason="waiting for " + ", ".join(deps), until=start_at
                    ),
                )
                self.deps.settle([task_id])
            elif start_at is not None:
                book.apply(
                    t,
                    book.sm.mark_blocked(
                        t.snap, reason=f"waiting until {start_at}", until=start_at
                    ),
                )
                self.deps.release(t, now)  # arms its start timer
            else:
                self.deps.release(t, now)
            picked = self.launcher.pick_for_pump()
        self.launcher.pump(picked)  # the outbox is flushed before anything launches
        return task_id


def _start_at(spec: TaskSpec, timing: Mapping[str, Any] | None, now: datetime) -> datetime | None:
    """When a delayed task may start (None: now). The call's ``timing`` wins over the
    spec's ``delay`` / ``not_before``; a time already passed is no delay."""
    delay = spec.delay if timing is None else timing.get("delay")
    not_before = spec.not_before if timing is None else timing.get("not_before")
    at = now + timedelta(seconds=delay) if delay else not_before
    return at if at is not None and at > now else None


#: Argument types that are JSON as they are (the common case needs no trial encoding).
_PLAIN_JSON = frozenset({str, int, float, bool, type(None)})


def recorded_call(
    task_id: str, now: datetime, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> KeepRecord | None:
    """A TaskCall record when the arguments are plain JSON (so ``reconcile(requeue)`` can
    run the task again by name); None otherwise. A name and data, never code."""
    plain = _PLAIN_JSON
    # once per submit with a store: scalars (and no arguments at all) are JSON without
    # a trial json.dumps; anything else is tried
    if not all(type(a) in plain for a in args) or not all(
        type(k) is str and type(v) in plain for k, v in kwargs.items()
    ):
        try:
            json.dumps([list(args), kwargs])
        except (TypeError, ValueError):
            return None
    # what is empty is left out: a call without arguments records {}
    payload: dict[str, Any] = {}
    if args:
        payload["args"] = list(args)
    if kwargs:
        payload["kwargs"] = kwargs
    rec = EventRecord(
        event_id=f"call-{task_id}",
        task_id=task_id,
        at=now,
        type="TaskCall",
        payload=payload,
    )
    return KeepRecord(rec)
