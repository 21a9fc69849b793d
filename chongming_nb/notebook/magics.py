"""IPython magics: ``%load_ext chongming_nb`` registers

* ``%%task NAME [--as VAR] [--after NAME_OR_ID ...] [--retry N] [--timeout S] [--tag T ...]``
  — run the cell body as a background task with ``ctx`` (the TaskContext) in scope, and
  show its live row. The value of the cell's last expression becomes the task's result.
  The handle is bound to ``VAR`` (with ``--as``) and to ``_``, as a cell's value would be.
* ``%tasks [--status S] [--tag T] [--name PREFIX]`` — show the board.
* ``%task stop|pause|resume|retry|skip NAME_OR_ID`` — apply a verb.

Bad arguments print a usage message and submit nothing. The cell body is the user's own
code, compiled in their own namespace in their own kernel.
"""

from __future__ import annotations

import argparse
import ast
import keyword
import shlex
from collections.abc import Callable
from typing import Any

from chongming_nb.notebook.schema import VERBS

TASK_USAGE = (
    "usage: %%task NAME [--as VAR] [--after NAME_OR_ID ...] [--retry N] [--timeout SECONDS]"
    " [--tag TAG ...]"
)
LOADED_MESSAGE = (
    "chongming_nb magics: %%task NAME [--as VAR] runs a cell as a task; "
    "%tasks shows the board; %task stop|pause|resume|retry|skip NAME_OR_ID"
)
TASKS_USAGE = "usage: %tasks [--status STATUS] [--tag TAG] [--name PREFIX]"
VERB_USAGE = f"usage: %task {{{'|'.join(VERBS)}}} NAME_OR_ID"


class UsageError(ValueError):
    """Bad magic arguments; the message says what was wrong."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise UsageError(message or "")


def _task_parser() -> _Parser:
    p = _Parser(prog="%%task", add_help=False)
    p.add_argument("name")
    p.add_argument("--as", dest="var", default=None)
    p.add_argument("--after", nargs="+", action="extend", default=[])
    p.add_argument("--retry", type=int, default=None)
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--tag", action="append", default=[])
    return p


def _tasks_parser() -> _Parser:
    p = _Parser(prog="%tasks", add_help=False)
    p.add_argument("--status", default=None)
    p.add_argument("--tag", default=None)
    p.add_argument("--name", default=None)
    return p


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def parse_task_line(line: str) -> argparse.Namespace:
    """Parse the ``%%task`` line; :class:`UsageError` names what is wrong."""
    ns = _task_parser().parse_args(_split(line))
    if not ns.name.strip():
        raise UsageError("NAME must not be empty")
    if ns.retry is not None and ns.retry < 0:
        raise UsageError(f"--retry must be >= 0, got {ns.retry}")
    if ns.timeout is not None and not ns.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {ns.timeout}")
    if ns.var is not None and (not ns.var.isidentifier() or keyword.iskeyword(ns.var)):
        raise UsageError(f"--as needs a Python variable name, got {ns.var!r}")
    return ns


def compile_cell(cell: str, name: str) -> Any:
    """Compile the cell body into a code object for ``def _(ctx): <body>`` whose last
    expression is returned. Raises SyntaxError for a broken cell."""
    tree = ast.parse(cell, filename=f"<%%task {name}>", mode="exec")
    body = list(tree.body)
    if body and isinstance(body[-1], ast.Expr):
        last = body[-1]
        body[-1] = ast.copy_location(ast.Return(value=last.value), last)
    if not body:
        body = [ast.Pass()]
    fn = ast.FunctionDef(
        name="_chongming_task_cell",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg="ctx")],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    module = ast.Module(body=[fn], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, f"<%%task {name}>", "exec")


def resolve_task(ctl: Any, key: str) -> str:
    """A task id, or the newest task with exactly this name."""
    try:
        ctl.get(key)
        return key
    except Exception:
        pass
    for snap in ctl.list_tasks(name_prefix=key):
        if snap.name == key:
            return str(snap.task_id)
    raise UsageError(f"no task with id or name {key!r}")


class TaskMagics:
    """The magic implementations, bound to a shell and a controller factory."""

    def __init__(
        self,
        shell: Any,
        get_controller: Callable[[], Any],
        display: Callable[[Any], None] | None = None,
        out: Callable[[str], None] = print,
    ) -> None:
        self.shell = shell
        self._get_controller = get_controller
        self._out = out
        if display is None:
            from IPython.display import display as ipy_display

            display = ipy_display
        self._display = display

    # %%task
    def task_cell(self, line: str, cell: str) -> Any:
        try:
            ns = parse_task_line(line)
        except UsageError as exc:
            self._out(f"%%task: {exc}\n{TASK_USAGE}")
            return None
        try:
            code = compile_cell(cell, ns.name)
        except SyntaxError as exc:
            self._out(f"%%task {ns.name}: the cell does not compile: {exc}")
            return None
        ctl = self._get_controller()
        try:
            after = [resolve_task(ctl, key) for key in ns.after]
        except UsageError as exc:
            self._out(f"%%task: --after: {exc}\n{TASK_USAGE}")
            return None
        user_ns = self.shell.user_ns
        scope: dict[str, Any] = {}
        exec(code, user_ns, scope)  # defines the function only; runs nothing yet
        body = scope["_chongming_task_cell"]

        def cell_task(ctx: Any) -> Any:
            return body(ctx)

        cell_task.__name__ = ns.name
        cell_task.__qualname__ = ns.name
        kwargs: dict[str, Any] = {"name": ns.name}
        if after:
            kwargs["after"] = after
        if ns.retry is not None:
            kwargs["retry"] = ns.retry + 1  # --retry N: up to N retries
        if ns.timeout is not None:
            kwargs["timeout"] = ns.timeout
        if ns.tag:
            kwargs["tags"] = list(ns.tag)
        try:
            handle = ctl.submit(cell_task, **kwargs)
        except Exception as exc:
            self._out(f"%%task {ns.name}: not submitted: {exc}")
            return None
        if ns.var is not None:
            self.shell.user_ns[ns.var] = handle
        self.shell.user_ns["_"] = handle
        self._display(handle)
        return None

    # %tasks
    def tasks_line(self, line: str) -> Any:
        try:
            ns = _tasks_parser().parse_args(_split(line))
        except UsageError as exc:
            self._out(f"%tasks: {exc}\n{TASKS_USAGE}")
            return None
        ctl = self._get_controller()
        filters = {
            k: v
            for k, v in (("status", ns.status), ("tag", ns.tag), ("name_prefix", ns.name))
            if v is not None
        }
        try:
            widget = ctl.board(**filters)
        except Exception as exc:
            self._out(f"%tasks: {exc}\n{TASKS_USAGE}")
            return None
        self._display(widget)
        return None

    # %task VERB NAME_OR_ID
    def task_line(self, line: str) -> Any:
        try:
            parts = _split(line)
            if len(parts) != 2:
                raise UsageError("expected a verb and a task name or id")
            verb, key = parts
            if verb not in VERBS:
                raise UsageError(f"unknown verb {verb!r}")
            ctl = self._get_controller()
            task_id = resolve_task(ctl, key)
        except UsageError as exc:
            self._out(f"%task: {exc}\n{VERB_USAGE}")
            return None
        ok, reason = ctl.apply(task_id, verb, actor="magic")
        label = f"{verb} {task_id}"
        self._out(f"{label}: ok" if ok else f"{label}: refused: {reason}")
        return None


def load_ipython_extension(
    ip: Any,
    get_controller: Callable[[], Any] | None = None,
    out: Callable[[str], None] = print,
) -> TaskMagics:
    """Register ``%%task``, ``%task`` and ``%tasks`` on the shell ``ip`` and say so in one
    line (``out``)."""
    if get_controller is None:
        from chongming_nb.control.kernel import get_controller as kernel_controller

        get_controller = kernel_controller
    magics = TaskMagics(ip, get_controller, out=out)
    ip.register_magic_function(magics.task_cell, magic_kind="cell", magic_name="task")
    ip.register_magic_function(magics.task_line, magic_kind="line", magic_name="task")
    ip.register_magic_function(magics.tasks_line, magic_kind="line", magic_name="tasks")
    out(LOADED_MESSAGE)
    return magics
