"""The messages a task table takes from its front end: clicks on a row's verbs, bulk
verbs, detail (logs and traceback) requests, sync requests and word that a view was
drawn, validated against :mod:`chongming_nb.notebook.schema`, applied through the
controller and acknowledged.

A mixin of :class:`chongming_nb.notebook.widget.TaskTable` (its state is the table's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from chongming_nb.core.errors import TaskNotFound
from chongming_nb.notebook import schema as S
from chongming_nb.notebook.older import Older, add_counts
from chongming_nb.notebook.outputs import saw_view
from chongming_nb.notebook.rows import epoch_ms, summarize

log = logging.getLogger("chongming_nb.notebook")

#: Log lines a "detail" request returns at most.
DETAIL_LOG_LIMIT = 500


class TableRequests:
    """Requests from the front end (a mixin of ``TaskTable``)."""

    _ctl: Any
    _clock: Any
    _lock: Any
    _rows: dict[str, dict[str, Any]]
    _dirty: set[str]
    _seq: int
    _older: Older
    _send_custom: Callable[[dict[str, Any]], None]
    _request_flush: Callable[[], None]

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any = None) -> None:
        """Handle one message from the front end. Runs on the comm thread (a subshell
        thread while a cell is busy). Never raises."""
        log.debug("widget message on %s: %r", threading.current_thread().name, content)
        try:
            req = S.parse_client_message(content)
        except S.SchemaError as exc:
            log.warning("ignored malformed widget message: %s", exc)
            return
        except Exception:
            log.exception("ignored unreadable widget message")
            return
        try:
            self.handle_request(req)
        except Exception:
            log.exception("widget request %r failed", req)
            rid = getattr(req, "request_id", None)
            if isinstance(rid, int):
                self._send_custom(S.ack(rid, False, "internal error; see the kernel log"))

    def handle_request(self, req: S.ClientMessage) -> None:
        if isinstance(req, S.ActionRequest):
            self._handle_action(req)
        elif isinstance(req, S.BulkRequest):
            self._handle_bulk(req)
        elif isinstance(req, S.DetailRequest):
            self._handle_detail(req)
        elif isinstance(req, S.ViewDrawn):
            saw_view()  # (no answer: the view has the rows it was drawn with)
        else:
            self._send_full()

    def _handle_action(self, req: S.ActionRequest) -> None:
        with self._lock:
            known = req.task_id in self._rows
        ok: bool
        reason: str | None
        if not known:
            ok, reason = False, f"task {req.task_id!r} is not in this table"
        else:
            args = None if req.key is None else {"request_key": req.key}
            ok, reason = self._ctl.apply(req.task_id, req.action, actor="widget", args=args)
            with self._lock:
                self._dirty.add(req.task_id)
            self._request_flush()
        self._send_custom(S.ack(req.request_id, ok, reason, task_id=req.task_id, action=req.action))

    def _handle_bulk(self, req: S.BulkRequest) -> None:
        with self._lock:
            ids = list(self._rows)
        applied = refused = 0
        for tid in ids:
            allowed, _ = self._ctl.can_all(tid).get(req.action, (False, None))
            if not allowed:
                continue
            ok, _ = self._ctl.apply(tid, req.action, actor="widget")
            applied += ok
            refused += not ok
            with self._lock:
                self._dirty.add(tid)
        self._request_flush()
        verb = {"pause": "paused", "resume": "resumed", "stop": "stopped"}.get(
            req.action, req.action
        )
        reason = f"{verb} {applied} task{'s' if applied != 1 else ''}"
        if refused:
            reason += f"; {refused} refused"
        if not applied and not refused:
            reason = f"no task can be {verb} now"
        self._send_custom(S.ack(req.request_id, applied > 0, reason, action=req.action))

    def _handle_detail(self, req: S.DetailRequest) -> None:
        with self._lock:
            known = req.task_id in self._rows
        if not known:
            self._send_custom(
                S.ack(req.request_id, False, f"task {req.task_id!r} is not in this table")
            )
            return
        records = self._ctl.logs(req.task_id, limit=DETAIL_LOG_LIMIT)
        logs = [
            {
                "at": epoch_ms(getattr(r, "at", None)),
                "stream": str(getattr(r, "stream", "")),
                "line": str(getattr(r, "line", "")),
                "level": getattr(r, "level", None),
            }
            for r in records[-DETAIL_LOG_LIMIT:]
        ]
        try:
            snap = self._ctl.get(req.task_id)
        except TaskNotFound:
            snap = None
        failure = snap.failure if snap is not None else None
        self._send_custom(
            {
                "type": "detail",
                "request_id": req.request_id,
                "task_id": req.task_id,
                "logs": logs,
                "traceback": failure.traceback if failure is not None else None,
                "failure": None
                if failure is None
                else {"kind": str(failure.kind), "message": failure.message},
            }
        )

    def _send_full(self) -> None:
        with self._lock:
            rows = [dict(r) for r in self._rows.values()]
            hidden = dict(self._older.hidden)
            msg = {
                "type": "full",
                "seq": self._seq,
                "rows": rows,
                "summary": add_counts(summarize(rows), hidden),
                "hidden": hidden,
                "at": epoch_ms(self._clock.now()),
            }
        self._send_custom(msg)
