"""Creating a run's tasks: a node's task once every dependency has one, a map's expander
and, once its items are known, one task per item plus the collector.

Every function here is called with the run's lock held."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from chongming_nb.control.pipeline._bodies import Expand, Gather, NodeCall, Restored, RunWhen
from chongming_nb.control.pipeline._node import Node
from chongming_nb.control.pipeline._record import append_manifest, save_record
from chongming_nb.control.pipeline._resume import file_name
from chongming_nb.control.pipeline._sleep import SleepBody, SleepStep
from chongming_nb.control.pipeline._state import RunState, TaskInfo
from chongming_nb.control.spec import wants_context
from chongming_nb.core.policies import JoinMode, RetryPolicy
from chongming_nb.core.states import STATUS, TERMINAL

__all__ = ["expand", "materialize"]

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


def _rep(run: RunState, name: str) -> str | None:
    """The task standing for node ``name`` for its dependants (None: not yet)."""
    nr = run._nodes[name]
    if nr.task_id is not None:
        return nr.task_id
    if nr.expander is not None:
        st = run._status.get(nr.expander)
        if st is not None and st[1] in TERMINAL and st[1] is not S.SUCCEEDED:
            return nr.expander  # the map never expanded: dependants see why
    return None


def materialize(run: RunState, restored: Mapping[str, Any] | None = None) -> None:
    """Create the tasks of every waiting node whose dependencies exist (in order)."""
    still: list[str] = []
    for name in run._waiting:
        nr = run._nodes[name]
        node = nr.node
        reps = [_rep(run, d) for d in node.deps]
        if any(r is None for r in reps):
            still.append(name)
            continue
        after = [r for r in reps if r is not None]
        names = dict(zip(node.deps, after, strict=True))
        if restored is not None and name in restored:
            tid = _create(
                run,
                Restored(restored[name]),
                (),
                {},
                node,
                after,
                name,
                "node",
                names,
                when=None,
            )
            nr.task_id = tid
        elif node.is_map:
            tid = _create(
                run,
                NodeCall(Expand(node.items, name), True),
                (),
                {},
                node,
                after,
                f"{name}.items",
                "expander",
                names,
                when=_when(run, node),
                retry=RetryPolicy(),
            )
            nr.expander = tid  # the collector comes once the items are known
        else:
            save_to = _output_path(run, node)
            fn = SleepBody(run, name, node.fn) if isinstance(node.fn, SleepStep) else node.fn
            call = NodeCall(fn, wants_context(fn), save_to, run._serializer(node))
            nr.output = save_to
            tid = _create(
                run,
                call,
                node.args,
                node.kwargs,
                node,
                after,
                name,
                "node",
                names,
                when=_when(run, node),
            )
            nr.task_id = tid
    run._waiting = still


def _when(run: RunState, node: Node) -> Callable[[Mapping[Any, Any]], Any] | None:
    if node.when is None:
        return None
    return RunWhen(run, node.when, _ancestors(run, node.name))


def _ancestors(run: RunState, name: str) -> set[str]:
    """Every node upstream of ``name`` (transitively) in this run."""
    seen: set[str] = set()
    stack = list(run._nodes[name].node.deps)
    while stack:
        d = stack.pop()
        if d not in seen and d in run._nodes:
            seen.add(d)
            stack.extend(run._nodes[d].node.deps)
    return seen


def _output_path(run: RunState, node: Node) -> Path | None:
    if run.outputs_dir is None:
        return None
    return run.outputs_dir / file_name(node.name, run._serializer(node).suffix)


def _create(
    run: RunState,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    node: Node,
    after: list[str],
    task_name: str,
    role: str,
    names: Mapping[str, str],
    *,
    when: Any = None,
    join: JoinMode | None = None,
    retry: RetryPolicy | None = None,
    tags: frozenset[str] | None = None,
    index: int | None = None,
) -> str:
    spec = node.spec
    if isinstance(call, NodeCall):
        call.__chongming_task__ = spec
    # validated when the node was added (spec values, and its arguments bound against
    # the function): the task's final spec is built here once, without re-checking
    final = spec.evolve(
        name=task_name,
        tags=tags if tags is not None else spec.tags,
        retry=retry or spec.retry,
    )
    # the controller's intake room, with the run's options (submit() has none of them)
    start = (None, None) if isinstance(call, Restored) else _start(run, node)  # done: no wait
    tid = run.ctl._intake.submit(
        call,
        args,
        kwargs,
        after=after,
        pipeline_run_id=run.id,
        join=join or node.join,
        when=when,
        node=task_name,
        upstream_names=names,
        prepared=(final, isinstance(call, NodeCall)),  # Restored takes no ctx
        start=start,
    )
    run._tasks[tid] = TaskInfo(node.name, role, tuple(after), index)
    for d in after:
        run._dependants.setdefault(d, []).append(tid)
    run._open += 1
    return tid


def _start(run: RunState, node: Node) -> tuple[None, datetime | None]:
    """When a delayed step (``delay=`` / ``not_before=``) may start: fixed the first time
    the run creates one of its tasks (a map's expander, items and collector share it)
    and written down at once, like a sleep step's wake time, so that a run resumed from
    this one (``resume_from``, also after a crash) waits only for what is left."""
    spec = node.spec
    if spec.delay is None and spec.not_before is None:
        return (None, None)
    at = run._wakes.get(node.name)
    if at is None:
        at = spec.not_before or run._now() + timedelta(seconds=spec.delay or 0.0)
        run._wakes[node.name] = at
        append_manifest(run, {"event": "delayed", "node": node.name, "start_at": at.isoformat()})
        save_record(run, force=True)
    return (None, at)


def expand(run: RunState, name: str, expander: str) -> None:
    """The items are known: create one task per item, then the collector."""
    nr = run._nodes[name]
    node = nr.node
    items = run.ctl.result(expander)
    tags = node.spec.tags
    if node.max_parallel is not None:
        tag = f"chongming.map:{run.id}:{name}"
        run.ctl.set_run_limit(tag, node.max_parallel)
        run._limit_tags.append(tag)
        tags = tags | {tag}
    inject = wants_context(node.fn)
    children: list[str] = []
    for i, item in enumerate(items):
        tid = _create(
            run,
            NodeCall(node.fn, inject),
            (item, *node.args),
            node.kwargs,
            node,
            [expander],
            f"{name}[{i}]",
            "child",
            {},
            join=JoinMode.ALL_SUCCEEDED,
            tags=tags,
            index=i,
        )
        children.append(tid)
    nr.children = children
    save_to = _output_path(run, node)
    nr.output = save_to
    nr.task_id = _create(
        run,
        NodeCall(Gather(children), True, save_to, run._serializer(node)),
        (),
        {},
        node,
        children or [expander],
        name,
        "collector",
        {},
        join=JoinMode.ALL_SUCCEEDED,
        retry=RetryPolicy(),
        tags=frozenset(),
    )
