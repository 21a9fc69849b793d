"""The commands that read one task or list them: ``ps``, ``status``, ``logs``,
``events``, ``attempts`` and ``verify``."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from typing import Any

from chongming_nb.cli.common import (
    _PS_HEADER,
    _STREAM_PAGE,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VERIFY,
    CliBase,
    CliError,
    _parse_time,
    _progress,
    _ps_row,
    _status,
    _table,
    _when,
    clean,
    json_text,
    quoted,
    statuses_of,
    to_jsonable,
)
from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import Command, CommandState, TaskSnapshot
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import TaskQuery

#: What becomes of a task whose owner is gone.
_SETTLED_BY = (
    "nothing will move it until a controller opened on this store (cn.get_controller()) "
    "or ctl.reconcile() settles it: lost if it had started, else cancelled"
)


def _with_gone(s: TaskSnapshot, gone: Mapping[str, str]) -> dict[str, Any]:
    """A task as ``--json`` prints it: its snapshot and ``owner_gone`` (why its owner is
    provably gone, else null)."""
    item: dict[str, Any] = to_jsonable(s)
    item["owner_gone"] = gone.get(s.task_id)
    return item


#: A command in these states has not reached its task yet.
_NOT_APPLIED = frozenset({CommandState.PENDING, CommandState.CLAIMED})


def _waiting(c: Command) -> str:
    """A command its owner has not applied: the verb, who sent it and when, and where
    it stands (queued in the store, or claimed by the owner and being applied)."""
    where = (
        "queued, not claimed by its owner yet"
        if c.state is CommandState.PENDING
        else f"claimed by {c.claimed_by or 'its owner'}, not applied yet"
    )
    return f"{c.verb} from {c.actor} at {_when(c.created_at)} UTC: {where}"


class Reading(CliBase):
    def cmd_ps(self) -> int:
        a = self.args
        statuses: frozenset[TaskStatus] | None = None
        if a.status:
            statuses = statuses_of(a.status, TaskStatus, "known statuses")
        elif a.active:
            statuses = frozenset(s for s in TaskStatus if s not in TERMINAL)
        q = TaskQuery(
            status=statuses,
            tag=a.tag,
            name_prefix=a.name,
            pipeline_run_id=a.run,
            limit=a.limit if a.limit > 0 else _STREAM_PAGE,
        )
        # one keyset page for --limit N (its cost does not grow with the store); all
        # pages, each written as it comes, for --limit 0 (memory does not grow either)
        after: str | None = a.after
        widths: list[int] | None = None
        shown = 0
        opened = False  # the JSON array opens once the store has answered, so a store
        # that cannot be opened leaves stdout empty (a script never reads a lone "[")
        while True:
            try:
                snaps, after = self.store.page(q, after=after)
            except StoreError as exc:
                if a.after is not None and shown == 0:
                    raise CliError(EXIT_USAGE, f"--after: {exc}") from exc
                raise
            if a.json and not opened:
                self.out.write("[")
                opened = True
            gone = self.gone(snaps)
            if a.json:
                for s in snaps:
                    sep = ",\n" if shown else "\n"
                    item = json_text(_with_gone(s, gone))
                    self.out.write(sep + textwrap.indent(item, "  "))
                    shown += 1
            else:
                rows = [_ps_row(s, gone.get(s.task_id)) for s in snaps]
                widths = _table(rows, _PS_HEADER, self.out, widths=widths)
                shown += len(rows)
            if after is None or a.limit > 0:
                break
        if a.json:
            self.out.write("\n]\n" if shown else "]\n")
            if after is not None:  # (stdout stays one JSON array; the way on, for a person)
                self.err.write(f"(more: --after {after})\n")
            return EXIT_OK
        if not shown:
            self.out.write("(no tasks)\n")
        elif after is not None:
            self.out.write(f"(more: --after {after})\n")
        return EXIT_OK

    def cmd_status(self) -> int:
        s = self.task(self.args.task_id)
        gone = self.gone([s])
        # verbs sent (by this CLI, the sidebar, the REST API) that its owner has not
        # applied yet: a `--wait` that timed out leaves its command here
        waiting = [c for c in self.store.commands(s.task_id) if c.state in _NOT_APPLIED]
        if self.args.json:
            item = _with_gone(s, gone)
            item["commands_waiting"] = to_jsonable(waiting)
            self.emit_json(item)
            return EXIT_OK
        why = gone.get(s.task_id)
        lines: list[tuple[str, Any]] = [
            ("id", s.task_id),
            ("name", s.name),
            ("status", _status(s, why)),
            ("version", s.status_version),
            ("requested", s.requested_action.value if s.requested_action else "-"),
            *(("command", _waiting(c)) for c in waiting),
            ("attempt", f"{s.attempt}/{s.max_attempts}"),
            ("progress", _progress(s)),
            ("message", s.progress.message if s.progress and s.progress.message else "-"),
            ("created", _when(s.created_at)),
            ("started", _when(s.started_at)),
            ("ended", _when(s.ended_at)),
            ("heartbeat", _when(s.last_heartbeat_at)),
            ("owner", s.lease_owner or "-"),
            ("executor", s.executor or "-"),
            ("pid", s.pid if s.pid is not None else "-"),
            ("pipeline run", s.pipeline_run_id or "-"),
            ("tags", ", ".join(sorted(s.tags)) or "-"),
            ("deps", ", ".join(s.deps) or "-"),
        ]
        if s.failure is not None:
            lines.append(("failure", f"{s.failure.kind.value}: {s.failure.message}"))
        if why is not None:
            lines.append(("owner gone", f"{why}; {_SETTLED_BY}"))
        width = max(len(k) for k, _ in lines)
        for k, v in lines:
            self.out.write(f"{k.ljust(width)}  {clean(v)}\n")
        return EXIT_OK

    def cmd_logs(self) -> int:
        self.task_or_history(self.args.task_id)
        since = _parse_time(self.args.since) if self.args.since else None
        recs = self.store.logs(self.args.task_id, limit=self.args.limit or None, since=since)
        if self.args.json:
            self.emit_json(recs)
            return EXIT_OK
        for r in recs:
            level = f" {r.level}" if r.level else ""
            self.out.write(f"{_when(r.at)} [{clean(r.stream)}{clean(level)}] {clean(r.line)}\n")
        return EXIT_OK

    def cmd_events(self) -> int:
        self.task_or_history(self.args.task_id)
        types = frozenset(self.args.type) if self.args.type else None
        evs = self.store.events(self.args.task_id, types=types, limit=self.args.limit or None)
        hist = self.store.history(self.args.task_id)
        if self.args.json:
            self.emit_json({"transitions": hist, "events": evs})
            return EXIT_OK
        self.out.write("transitions:\n")
        _table(
            [
                (
                    str(t.version),
                    _when(t.at),
                    f"{t.from_status.value} -> {t.to_status.value}",
                    t.trigger,
                    t.actor,
                    t.reason or "",
                )
                for t in hist
            ],
            ("V", "AT", "CHANGE", "TRIGGER", "ACTOR", "REASON"),
            self.out,
        )
        if evs:
            self.out.write("events:\n")
            _table(
                [(_when(e.at), e.type, json.dumps(to_jsonable(e.payload))) for e in evs],
                ("AT", "TYPE", "PAYLOAD"),
                self.out,
            )
        return EXIT_OK

    def cmd_attempts(self) -> int:
        self.task_or_history(self.args.task_id)
        atts = self.store.attempts(self.args.task_id)
        if self.args.json:
            self.emit_json(atts)
            return EXIT_OK
        rows = [
            (
                str(a.attempt),
                _when(a.started_at),
                _when(a.ended_at),
                "-" if a.duration is None else f"{a.duration.total_seconds():.3f}s",
                a.outcome.value if a.outcome else "-",
                a.failure_kind.value if a.failure_kind else "-",
                a.failure_message or "",
            )
            for a in atts
        ]
        _table(
            rows, ("#", "STARTED", "ENDED", "DURATION", "OUTCOME", "FAILURE", "MESSAGE"), self.out
        )
        if not atts:
            self.out.write("(no attempts)\n")
        return EXIT_OK

    def task_or_history(self, task_id: str) -> None:
        """Unknown id -> exit 2, unless the task was pruned but its history remains."""
        if self.store.get(task_id) is None and not self.store.history(task_id):
            raise CliError(EXIT_USAGE, f"no task with id {quoted(task_id)} in {self.store.url}")

    def cmd_verify(self) -> int:
        """Replay each task's transitions and compare them with its snapshot: a gap (a
        transition the store never received, a snapshot ahead of or behind its
        history) is reported, and the exit code is 6 when there is one."""
        from chongming_nb.control.persistence import verify

        store = self.store
        ids = list(self.args.task_ids) or [
            s.task_id for s in store.query(TaskQuery(order="oldest"))
        ]
        results: list[dict[str, Any]] = []
        for tid in ids:
            snap = store.get(tid)
            hist = store.history(tid)
            if snap is None:
                if not hist:
                    raise CliError(EXIT_USAGE, f"no task with id {quoted(tid)} in {store.url}")
                detail = f"snapshot pruned; {len(hist)} transitions kept"
                results.append({"task_id": tid, "name": None, "ok": True, "detail": detail})
                continue
            ok, detail = verify(hist, snap)
            results.append({"task_id": tid, "name": snap.name, "ok": ok, "detail": detail})
        bad = [r for r in results if not r["ok"]]
        if self.args.json:
            self.emit_json({"tasks": results, "ok": not bad})
        else:
            for r in results:
                mark = "ok " if r["ok"] else "GAP"
                name = f" {clean(r['name'])}" if r["name"] else ""
                self.out.write(f"{mark} {clean(r['task_id'])}{name}: {clean(r['detail'])}\n")
            self.out.write(
                f"{len(results)} tasks checked: {len(results) - len(bad)} ok, "
                f"{len(bad)} with gaps\n"
            )
        return EXIT_VERIFY if bad else EXIT_OK
