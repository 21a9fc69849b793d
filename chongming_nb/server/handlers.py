"""REST handlers of the server extension, and the one route table.

Every route is under ``<base_url>/chongming/api/`` and every handler is an
authenticated ``APIHandler`` (token or cookie; XSRF checked on POST by jupyter_server).
The control plane takes a task id and a verb from ``CONTROL_VERBS`` — never code —
checks it with the same ``StateMachine.can`` the kernel uses, and writes a ``Command``
into the store's leased queue; the owning kernel's controller claims and applies it.
Errors are JSON ``{"message": ...}`` with a 4xx status and change nothing.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from chongming_nb.control.ownership import refusal
from chongming_nb.core.models import Command, CommandState, TaskSnapshot
from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.notebook.rows import NO_PAUSE
from chongming_nb.server.contract import API_NAMESPACE, FEED_MAX_WAIT_S
from chongming_nb.server.listing import MAX_LIMIT, BadQuery, parse_listing, read_page
from chongming_nb.server.pictures import run_graph, task_timeline
from chongming_nb.server.serialize import (
    command_info,
    iso,
    owner_row,
    parse_owner,
    pause_clocks,
    task_detail,
    task_row,
    task_rows,
)
from chongming_nb.server.state import SETTINGS_KEY, ServerState
from chongming_nb.stores.protocol import OwnerRecord, RunRecord, TaskQuery, TaskStore

#: Ids the API accepts (task, command, kernel): printable, no slashes, bounded.
_ID = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")
DEFAULT_LOG_LINES = 500
MAX_REASON = 500
R = TypeVar("R")


def encode(payload: Any) -> str:
    """The JSON text of an answer (compact: a 2,000-row listing is megabytes)."""
    return json.dumps(payload, default=str, separators=(",", ":"))


class BadRequest(Exception):
    """A client error: answered as ``{"message": ...}`` with ``status``."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


class _Base(APIHandler):
    @property
    def cm(self) -> ServerState:
        state: ServerState = self.settings[SETTINGS_KEY]
        return state

    def _reply(self, payload: Any, status: int = 200) -> None:
        self._reply_json(encode(payload), status)

    def _reply_json(self, body: str, status: int = 200) -> None:
        """Send a body ``encode`` made (big ones are made on the store threads)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def _fail(self, err: BadRequest) -> None:
        self._reply({"message": err.message, **err.extra}, err.status)

    def _id_arg(self, value: str, what: str) -> str:
        if not _ID.match(value):
            raise BadRequest(400, f"{what} {value[:80]!r} is not a valid id")
        return value

    def _valid_id(self, value: str, what: str) -> bool:
        """Is ``value`` a valid id? If not, the 400 answer is sent."""
        try:
            self._id_arg(value, what)
        except BadRequest as err:
            self._fail(err)
            return False
        return True

    async def _answer(
        self,
        find: Callable[[TaskStore], R | None],
        build: Callable[[TaskStore, R], Any],
        missing: str,
    ) -> None:
        """On the store threads, ``find`` the record in the store and ``build`` the
        answer from it; reply with that, 404 ``missing`` when there is no record."""

        def read() -> Any:
            store = self.cm.get_store()
            found = find(store)
            return None if found is None else build(store, found)

        payload = await self.cm.run(read)
        if payload is None:
            self._fail(BadRequest(404, missing))
            return
        self._reply(payload)

    def _int_arg(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(400, f"{name} must be an integer, got {raw[:40]!r}") from None
        if not lo <= value <= hi:
            raise BadRequest(400, f"{name} must be between {lo} and {hi}, got {value}")
        return value

    async def _context(self) -> tuple[dict[str, OwnerRecord], dict[str, str]]:
        owners = await self.cm.run(lambda: self.cm.get_store().owners())
        return {o.owner_id: o for o in owners}, await self.cm.sessions()

    def _rows(
        self,
        snaps: Sequence[TaskSnapshot],
        owners: dict[str, OwnerRecord],
        sessions: dict[str, str],
    ) -> list[dict[str, Any]]:
        # (on a store thread: every caller builds its answer in cm.run)
        now = self.cm.clock.now()
        gone = self.cm.liveness.gone(snaps, now=now, owners=owners)
        pauses = pause_clocks(self.cm.get_store(), snaps)  # one read for every row
        return task_rows(
            snaps,
            sm=self.cm.sm,
            now=now,
            owners=owners,
            sessions=sessions,
            gone=gone,
            pauses=pauses,
        )


def _owners_of(kernels: set[str], owners: dict[str, OwnerRecord]) -> frozenset[str]:
    """The controllers that ran in these kernels (every controller with a store keeps
    an owner record there; its kernel is the record's, else the one its id names)."""
    return frozenset(
        owner_id
        for owner_id, rec in owners.items()
        if (rec.kernel_id or parse_owner(owner_id)[2]) in kernels
    )


class TasksHandler(_Base):
    """``GET tasks?status=a,b&name=PREFIX&text=WORD&limit=N&after=CURSOR``: one keyset
    page (``next`` is the cursor of the following page, or null), the counts per status
    of the tasks the filter matches (``counts``; null with a name, text or owner filter
    whose matches span more than this page) and of the whole store (``totals``).
    ``kernel=ID`` / ``notebook=PATH``: the tasks of that kernel's controllers only (a
    notebook's: of the kernels its sessions have now), paged and counted as a text
    filter is."""

    @tornado.web.authenticated
    async def get(self) -> None:
        try:
            listing = parse_listing(self.get_query_arguments)
            kernel = self.get_query_argument("kernel", None) or None
            if kernel is not None:
                self._id_arg(kernel, "kernel")
            notebook = self.get_query_argument("notebook", None) or None
        except BadQuery as err:
            self._fail(BadRequest(400, str(err)))
            return
        except BadRequest as err:
            self._fail(err)
            return
        owners, sessions = await self._context()
        if kernel is not None or notebook is not None:
            kernels = {kernel} if kernel is not None else set(sessions)
            if notebook is not None:
                kernels &= {k for k, p in sessions.items() if p == notebook}
            listing = replace(listing, owners=_owners_of(kernels, owners))
        cursor = await self.cm.feed.primed()

        def answer() -> str | BadRequest:
            # the rows and JSON built here, on a store thread, so a big listing never
            # holds up the event loop
            store = self.cm.get_store()
            try:
                page = read_page(store, listing)
            except BadQuery as err:
                return BadRequest(400, str(err))
            return encode(
                {
                    "tasks": self._rows(page.tasks, owners, sessions),
                    "next": page.next,
                    "counts": None
                    if page.counts is None
                    else {k.value: v for k, v in page.counts.items()},
                    "totals": {k.value: v for k, v in page.totals.items()},
                    "cursor": cursor,
                    "sessions": sessions,
                    "now": iso(self.cm.clock.now()),
                }
            )

        got = await self.cm.run(answer)
        if isinstance(got, BadRequest):
            self._fail(got)
            return
        self._reply_json(got)


class TaskHandler(_Base):
    """``GET tasks/{id}``: the row plus attempts, history, logs and recent events."""

    @tornado.web.authenticated
    async def get(self, task_id: str) -> None:
        try:
            self._id_arg(task_id, "task id")
            lines = self._int_arg("logs", DEFAULT_LOG_LINES, 0, MAX_LIMIT)
        except BadRequest as err:
            self._fail(err)
            return
        owners, sessions = await self._context()

        def detail(store: TaskStore, snap: TaskSnapshot) -> dict[str, Any]:
            now = self.cm.clock.now()
            row = task_row(
                snap,
                sm=self.cm.sm,
                now=now,
                gone=self.cm.liveness.gone([snap], now=now, owners=owners).get(task_id),
                owners=owners,
                sessions=sessions,
                pauses=pause_clocks(store, [snap]).get(task_id, NO_PAUSE),
            )
            return task_detail(
                snap,
                row,
                attempts=store.attempts(task_id),
                history=store.history(task_id),
                logs=store.logs(task_id, limit=lines) if lines else [],
                events=store.events(task_id, limit=200),
            )

        await self._answer(lambda store: store.get(task_id), detail, f"unknown task {task_id!r}")


class TaskTimelineHandler(_Base):
    """``GET tasks/{id}/timeline``: the task's attempts as timeline data (the mime
    ``application/vnd.chongming.timeline+json``, one lane), for the sidebar's small
    timeline; a running attempt's bar ends at the server's now."""

    @tornado.web.authenticated
    async def get(self, task_id: str) -> None:
        if not self._valid_id(task_id, "task id"):
            return
        await self._answer(
            lambda store: store.get(task_id),
            lambda store, snap: task_timeline(store, snap, now=self.cm.clock.now()),
            f"unknown task {task_id!r}",
        )


class RunGraphHandler(_Base):
    """``GET runs/{id}/graph``: a pipeline run's graph from the store (its nodes and
    dependency edges from the run's record, each node's status from its task) and the
    listing rows of the tasks standing for its nodes (their ``can`` flags)."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        if not self._valid_id(run_id, "run id"):
            return
        owners, sessions = await self._context()

        def graph_of(store: TaskStore, record: RunRecord) -> dict[str, Any]:
            snaps = store.query(TaskQuery(pipeline_run_id=run_id))
            graph = run_graph(record, snaps)
            standing = {n["task"] for n in graph["nodes"] if n["task"]}
            graph["tasks"] = self._rows(
                [s for s in snaps if s.task_id in standing], owners, sessions
            )
            return graph

        await self._answer(
            lambda store: store.get_run(run_id), graph_of, f"unknown pipeline run {run_id!r}"
        )


class TaskCommandsHandler(_Base):
    """``POST tasks/{id}/commands`` with ``{"verb": "stop"}`` -> 202 and the command."""

    def _parse(self) -> tuple[str, str | None, str | None]:
        try:
            body = json.loads(self.request.body or b"")
        except (ValueError, UnicodeDecodeError):
            raise BadRequest(400, "the request body must be JSON") from None
        if not isinstance(body, dict):
            raise BadRequest(400, 'the request body must be a JSON object like {"verb": "stop"}')
        extra = sorted(set(body) - {"verb", "reason", "request_key"})
        if extra:
            raise BadRequest(400, f"unknown field(s): {', '.join(map(str, extra))}")
        verb = body.get("verb")
        if not isinstance(verb, str) or verb not in CONTROL_VERBS:
            raise BadRequest(
                400,
                f"unknown verb {str(verb)[:40]!r}; allowed: {', '.join(CONTROL_VERBS)}",
            )
        reason = body.get("reason")
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
            raise BadRequest(400, f"reason must be a string of at most {MAX_REASON} characters")
        key = body.get("request_key")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 100):
            raise BadRequest(400, "request_key must be a string of 1-100 characters")
        return verb, reason, key

    @tornado.web.authenticated
    async def post(self, task_id: str) -> None:
        try:
            self._id_arg(task_id, "task id")
            verb, reason, request_key = self._parse()
        except BadRequest as err:
            self._fail(err)
            return
        user = self.current_user
        who = getattr(user, "username", None) or str(user or "anonymous")
        # only the widget's fallback (its click, also sent here while the kernel is
        # busy) carries a request key: it is recorded as the widget's verb
        actor = f"{'widget' if request_key else 'sidebar'}:{who[:60]}"
        now = self.cm.clock.now()
        args: dict[str, Any] = {}
        if verb == "retry":
            args["force"] = True  # a person decided: the budget limits automatic retries
        if reason:
            args["reason"] = reason
        if request_key:
            args["request_key"] = request_key  # lets the kernel apply a click only once
        command = Command(
            command_id=uuid.uuid4().hex,
            task_id=task_id,
            verb=verb,
            args=args,
            actor=actor,
            created_at=now,
        )

        def write() -> tuple[str, Any]:
            store = self.cm.get_store()
            snap = store.get(task_id)
            if snap is None:
                return "missing", None
            ok, why = self.cm.sm.can(snap, verb, force=(verb == "retry"))
            if not ok:
                return "refused", why
            owners = {o.owner_id: o for o in store.owners()}
            gone = self.cm.liveness.gone([snap], now=now, owners=owners).get(task_id)
            if gone is not None:
                # nobody would claim it: answer now instead of leaving it pending
                return "refused", refusal(snap, gone)
            store.submit_command(command)
            return "queued", snap

        outcome, detail = await self.cm.run(write)
        if outcome == "missing":
            self._fail(BadRequest(404, f"unknown task {task_id!r}"))
            return
        if outcome == "refused":
            self._fail(BadRequest(409, f"cannot {verb} task {task_id!r} now: {detail}"))
            return
        self.cm.feed.nudge()
        self._reply(command_info(command), 202)


class CommandHandler(_Base):
    """``GET commands/{id}``: state (pending, claimed, done, rejected) and outcome."""

    @tornado.web.authenticated
    async def get(self, command_id: str) -> None:
        try:
            self._id_arg(command_id, "command id")
        except BadRequest as err:
            self._fail(err)
            return
        command = await self.cm.run(lambda: self.cm.get_store().get_command(command_id))
        if command is None:
            self._fail(BadRequest(404, f"unknown command {command_id!r}"))
            return
        if command.state in (CommandState.PENDING, CommandState.CLAIMED):
            self.cm.feed.nudge()
        self._reply(command_info(command))


class FeedHandler(_Base):
    """``GET feed?since=CURSOR&timeout=S``: long-poll for changed tasks."""

    @tornado.web.authenticated
    async def get(self) -> None:
        try:
            since = self._int_arg("since", 0, 0, 2**62)
            raw = self.get_query_argument("timeout", None)
            try:
                timeout = 25.0 if raw in (None, "") else float(raw)
            except ValueError:
                raise BadRequest(400, f"timeout must be a number, got {str(raw)[:40]!r}") from None
            if not 0 <= timeout <= FEED_MAX_WAIT_S:
                raise BadRequest(400, f"timeout must be between 0 and {FEED_MAX_WAIT_S:g}")
        except BadRequest as err:
            self._fail(err)
            return
        answer = await self.cm.feed.wait(since, timeout)
        if self.request.connection is None or self._finished:
            return
        owners, sessions = await self._context()

        def body() -> str:  # a reset answer holds every known task: built off the loop
            return encode(
                {
                    "cursor": answer.cursor,
                    "reset": answer.reset,
                    "tasks": self._rows(answer.tasks, owners, sessions),
                    "removed": answer.removed,
                    "counts": {k.value: v for k, v in answer.counts.items()},
                    "sessions": sessions,
                    "now": iso(self.cm.clock.now()),
                }
            )

        self._reply_json(await self.cm.run(body))


class OwnersHandler(_Base):
    """``GET owners``: the controllers that own tasks, with their kernel and notebook."""

    @tornado.web.authenticated
    async def get(self) -> None:
        owners, sessions = await self._context()
        self._reply({"owners": [owner_row(o, sessions) for o in owners.values()]})


#: THE route table: (path below /chongming/api/, handler).
ROUTES: tuple[tuple[str, type[_Base]], ...] = (
    (r"tasks", TasksHandler),
    (r"tasks/(?P<task_id>[^/]+)", TaskHandler),
    (r"tasks/(?P<task_id>[^/]+)/commands", TaskCommandsHandler),
    (r"tasks/(?P<task_id>[^/]+)/timeline", TaskTimelineHandler),
    (r"runs/(?P<run_id>[^/]+)/graph", RunGraphHandler),
    (r"commands/(?P<command_id>[^/]+)", CommandHandler),
    (r"feed", FeedHandler),
    (r"owners", OwnersHandler),
)


def route_table(base_url: str) -> list[tuple[str, type[_Base]]]:
    """The routes with the server's base URL in front, anchored at both ends."""
    return [(url_path_join(base_url, API_NAMESPACE, path) + "$", h) for path, h in ROUTES]
