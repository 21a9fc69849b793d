"""Display bundles (escaped html/plain snapshots) and the magics, on the real Controller."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.notebook import display
from chongming_nb.notebook.magics import (
    TaskMagics,
    compile_cell,
    load_ipython_extension,
    parse_task_line,
)
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing.widgets import FakeController, recording_comms

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def ctl() -> Iterator[Any]:
    c = cn.Controller(executor="thread")
    with recording_comms():
        yield c
    c.close()


def wait_status(ctl: Any, task_id: str, status: str, timeout: float = 20) -> None:
    """Block until the task reaches ``status`` (event-driven, not polling)."""
    reached = threading.Event()

    def on(event: Any) -> None:
        if getattr(event, "task_id", None) == task_id and ctl.get(task_id).status == status:
            reached.set()

    unsubscribe = ctl.watch(on)
    try:
        if ctl.get(task_id).status != status:
            assert reached.wait(timeout), f"{task_id} never reached {status}"
    finally:
        unsubscribe()


def test_bundle_has_widget_html_and_plain_and_escapes(fctl, clock, comms) -> None:
    tid = fctl.add(XSS, status="running", total=10).task_id
    fctl.bump(tid, 2, message=XSS)
    fctl.fail(tid, XSS, traceback=f"Traceback\n  {XSS}\nValueError: {XSS}")
    data, metadata = display.task_bundle(fctl, task_ids=[tid], kind="task", title=XSS)
    assert set(data) == {"text/plain", "text/html", display.WIDGET_MIME, display.SNAPSHOT_MIME}
    snap = data[display.SNAPSHOT_MIME]
    assert snap["rows"][0]["name"] == XSS  # data, drawn with textContent by the extension
    assert snap["model_id"] == data[display.WIDGET_MIME]["model_id"]
    assert metadata == {}
    html = data["text/html"]
    assert XSS not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script" not in html and "onerror=" not in html.replace("onerror=alert(1)&gt;", "")
    assert "<details><summary>traceback</summary><pre>" in html
    assert XSS in data["text/plain"]  # plain text needs no escaping
    model_id = data[display.WIDGET_MIME]["model_id"]
    assert isinstance(model_id, str) and model_id


def test_board_filters(fctl, clock, comms) -> None:
    fctl.add("io-1", status="running", tags=frozenset({"io"}))
    fctl.add("cpu-1", status="running")
    b = display.board(fctl, tag="io")
    assert [r["name"] for r in b.current_rows()] == ["io-1"]
    assert b.kind == "board"
    run = display.board(fctl, pipeline_run_id="r1")
    assert run.kind == "run" and run.current_rows() == []


def test_handle_repr_uses_task_bundle_with_real_controller(ctl) -> None:
    gate = threading.Event()

    def job(ctx: Any) -> str:
        ctx.progress(done=1, total=4, unit="steps", message=XSS)
        gate.wait(10)
        return "ok"

    h = ctl.submit(job, name="job")
    data, _ = h._repr_mimebundle_()
    assert display.WIDGET_MIME in data and "job" in data["text/plain"]
    gate.set()
    assert h.result(timeout=20) == "ok"


def test_widget_pause_resume_stop_on_the_real_controller(ctl) -> None:
    step = threading.Event()

    def work(ctx: Any) -> None:
        for _ in ctx.track(range(10_000), total=10_000, unit="rows"):
            step.wait(0.01)

    h = ctl.submit(work, name="cooperative")
    t = TaskTable(ctl, kind="task", task_ids=[h.id])
    wait_status(ctl, h.id, "running")
    for rid, (verb, target) in enumerate(
        [("pause", "paused"), ("resume", "running"), ("stop", "stopped")], start=1
    ):
        t._on_custom_msg(t, {"type": "action", "action": verb, "task_id": h.id, "request_id": rid})
        wait_status(ctl, h.id, target)
        ack = [m for m in t.comm.custom_messages() if m["type"] == "ack"][-1]
        assert ack["request_id"] == rid and ack["ok"] is True, ack
    t.flush(force=True)
    row = t.current_rows()[0]
    assert row["status"] == "stopped"
    assert row["can"] == {
        v: ctl.can(h.id, v, force=v == "retry")[0] for v in cn.core.state_machine.CONTROL_VERBS
    }
    t.close()


# --------------------------------------------------------------------------- magics


class FakeShell:
    def __init__(self) -> None:
        self.user_ns: dict[str, Any] = {}
        self.magics: dict[tuple[str, str], Any] = {}

    def register_magic_function(self, fn: Any, magic_kind: str, magic_name: str) -> None:
        self.magics[(magic_kind, magic_name)] = fn


@pytest.fixture
def shell_and_magics(ctl: Any) -> tuple[FakeShell, TaskMagics, list[Any], list[str]]:
    shell = FakeShell()
    shown: list[Any] = []
    said: list[str] = []
    magics = TaskMagics(shell, lambda: ctl, display=shown.append, out=said.append)
    return shell, magics, shown, said


def test_load_extension_registers_the_three_magics_and_names_them_in_one_line(ctl) -> None:
    shell = FakeShell()
    said: list[str] = []
    load_ipython_extension(shell, lambda: ctl, out=said.append)
    assert set(shell.magics) == {("cell", "task"), ("line", "task"), ("line", "tasks")}
    (line,) = said
    assert "\n" not in line
    for name in ("%%task", "%tasks", "%task stop"):
        assert name in line


def test_task_cell_binds_the_handle_with_as_and_underscore(ctl, shell_and_magics) -> None:
    shell, magics, shown, said = shell_and_magics
    magics.task_cell("answer --as h", "6 * 7")
    assert said == []
    (shown_handle,) = shown
    assert shell.user_ns["h"] is shown_handle
    assert shell.user_ns["_"] is shown_handle
    assert shell.user_ns["h"].result(timeout=20) == 42
    magics.task_cell("again", "1")
    assert shell.user_ns["_"] is shown[1]
    assert shell.user_ns["h"] is shown_handle


def test_task_cell_runs_in_background_with_ctx_and_user_namespace(ctl, shell_and_magics) -> None:
    shell, magics, shown, said = shell_and_magics
    shell.user_ns["factor"] = 3
    cell = "total = 0\nfor i in ctx.track(range(4), total=4):\n    total += i * factor\ntotal\n"
    magics.task_cell("summing --retry 2 --timeout 30 --tag demo --tag x", cell)
    assert said == []
    (h,) = shown
    assert h.result(timeout=20) == 18
    snap = ctl.get(h.id)
    assert snap.name == "summing"
    assert snap.tags == frozenset({"demo", "x"})
    assert snap.max_attempts == 3
    assert "total" not in shell.user_ns  # cell locals stay in the task


def test_task_cell_after_waits_for_the_named_task(ctl, shell_and_magics) -> None:
    _, magics, shown, said = shell_and_magics
    magics.task_cell("first", "41")
    magics.task_cell("second --after first", "42")
    first, second = shown
    assert second.result(timeout=20) == 42
    assert said == []
    assert ctl.get(second.id).deps == (first.id,)


@pytest.mark.parametrize(
    ("line", "cell", "needle"),
    [
        ("", "1", "usage: %%task"),
        ("name --retry many", "1", "invalid int value"),
        ("name --retry -1", "1", "--retry must be >= 0"),
        ("name --timeout 0", "1", "--timeout must be > 0"),
        ("name --bogus", "1", "unrecognized arguments"),
        ("name --after nosuchtask", "1", "no task with id or name 'nosuchtask'"),
        ("name 'unclosed", "1", "No closing quotation"),
        ("name", "def broken(:\n", "does not compile"),
        ("name --as 1x", "1", "--as needs a Python variable name"),
        ("name --as for", "1", "--as needs a Python variable name"),
    ],
)
def test_bad_task_arguments_print_usage_and_submit_nothing(
    ctl, shell_and_magics, line: str, cell: str, needle: str
) -> None:
    _, magics, shown, said = shell_and_magics
    magics.task_cell(line, cell)
    assert shown == []
    assert ctl.list_tasks() == []
    assert len(said) == 1 and needle in said[0]


def test_task_verb_line_magic(ctl, shell_and_magics) -> None:
    shell, magics, shown, said = shell_and_magics
    gate = threading.Event()
    shell.user_ns["gate"] = gate
    magics.task_cell("sleeper", "gate.wait(20)")
    magics.task_cell("blocked --after sleeper", "1")
    first, h = shown
    magics.task_line(f"skip {h.id}")
    magics.task_line("skip blocked")  # by name: already skipped -> refused
    magics.task_line("pause nosuch")
    magics.task_line("explode sleeper")
    magics.task_line("stop")
    assert said[0] == f"skip {h.id}: ok"
    assert ctl.get(h.id).status == "skipped"
    assert said[1].startswith(f"skip {h.id}: refused: ")
    assert "no task with id or name 'nosuch'" in said[2]
    assert "unknown verb 'explode'" in said[3]
    assert "expected a verb" in said[4]
    gate.set()
    assert first.result(timeout=20) is True


def test_tasks_line_magic_shows_a_board(ctl, shell_and_magics) -> None:
    _, magics, shown, said = shell_and_magics
    magics.task_cell("a --tag io", "1")
    magics.tasks_line("--tag io")
    board = shown[-1]
    assert isinstance(board, TaskTable) and board.kind == "board"
    magics.tasks_line("--colour red")
    assert "usage: %tasks" in said[-1]


def test_compile_cell_returns_the_last_expression() -> None:
    code = compile_cell("x = 2\nx * 21", "t")
    scope: dict[str, Any] = {}
    exec(code, {}, scope)
    assert scope["_chongming_task_cell"](None) == 42
    assert parse_task_line("n --after a b --tag t").after == ["a", "b"]


def test_fake_controller_matches_the_real_controller_surface() -> None:
    for name in ("get", "list_tasks", "can", "can_all", "apply", "watch", "logs", "stats"):
        assert callable(getattr(cn.Controller, name))
        assert callable(getattr(FakeController, name))
