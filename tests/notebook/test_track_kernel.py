"""``cn.track`` in a real Jupyter kernel (nbclient), and outside Jupyter altogether.

With a front end (``JPY_SESSION_NAME``, which jupyter_server gives a session's kernel):
the loop is a task of the kernel's controller, a stop is one plain line on stdout
instead of an error output, an error in the body fails the task when its cell ends, the
kind interrupt works. Without one (plain nbclient, ``python script.py``, terminal
IPython): a text bar on stderr, or nothing, and exactly the plain loop's items.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _executed import executed


def _run(cells: list[str], tmp_path: Path) -> list[Any]:
    return [c.outputs for c in executed(cells, tmp_path).cells]


def _json(outputs: list[Any]) -> Any:
    """The json a cell printed last. One ``print`` may reach nbclient as two stream
    outputs: ipykernel sends what stdout holds 0.2 s after the first write, and print
    writes its text and its end separately (a loaded machine can take that long
    between them): the last output alone can be just the newline."""
    stdout = "".join(
        o["text"] for o in outputs if o.get("output_type") == "stream" and o["name"] == "stdout"
    )
    return json.loads(stdout.splitlines()[-1])


def test_the_json_of_a_print_split_in_two_stream_outputs_is_read_whole() -> None:
    split = [
        {"output_type": "stream", "name": "stdout", "text": "before\n"},
        {"output_type": "stream", "name": "stdout", "text": '{"status": "failed"}'},
        {"output_type": "stream", "name": "stderr", "text": "noise\n"},
        {"output_type": "stream", "name": "stdout", "text": "\n"},
    ]
    assert _json(split) == {"status": "failed"}


def _errors(outputs: list[Any]) -> list[Any]:
    return [o for o in outputs if o.get("output_type") == "error"]


def test_a_loop_in_a_notebook_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "loops.ipynb"))
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "tasks.db"))
    out = _run(
        [
            "import json, os, signal\nimport chongming_nb as cn\nctl = cn.get_controller()",
            # 1: a stop at item 100 -> one line, no traceback
            "bar = cn.track(range(10_000), desc='convert')\n"
            "for i in bar:\n"
            "    if i == 100:\n"
            "        ctl.stop(bar.task_id)\n"
            "print('AFTER THE LOOP')",
            # 2: the next cell runs; the record says stopped
            "print(json.dumps({'status': str(ctl.get(bar.task_id).status),\n"
            "                  'done': ctl.get(bar.task_id).progress.done,\n"
            "                  'executor': ctl.get(bar.task_id).executor}))",
            # 3: an error in the body
            "for i in cn.track(range(10), desc='boom'):\n"
            "    if i == 3:\n"
            "        raise ValueError('bad row')",
            # 4: ... fails the loop's task when its cell ends
            "t = ctl.list_tasks(name_prefix='boom')[0]\n"
            "print(json.dumps({'status': str(t.status), 'message': t.failure.message,\n"
            "                  'done': t.progress.done}))",
            # 5: the kind interrupt: once stops at the next boundary; the handler comes back
            "before = signal.getsignal(signal.SIGINT)\n"
            "seen = []\n"
            "try:\n"
            "    for i in cn.track(range(1000), desc='kind'):\n"
            "        seen.append(i)\n"
            "        if i == 5:\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "except cn.Stopped as e:\n"
            "    print(json.dumps({'seen': seen, 'msg': str(e),\n"
            "                      'restored': signal.getsignal(signal.SIGINT) is before}))",
            # 6: twice within the window: KeyboardInterrupt at once
            "seen = []\n"
            "for i in cn.track(range(1000), desc='twice'):\n"
            "    seen.append(i)\n"
            "    if i == 5:\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        seen.append('after')",
            "t = ctl.list_tasks(name_prefix='twice')[0]\n"
            "print(json.dumps({'seen': seen, 'status': str(t.status),\n"
            "                  'restored': signal.getsignal(signal.SIGINT) is before,\n"
            "                  'attempts': int((ctl.attempts_df().executor == 'loop').sum())}))",
            # 8: a stop of an inner loop: its Stopped leaves the outer loop on the way out
            "outer = cn.track(range(3), desc='outer')\n"
            "for i in outer:\n"
            "    inner = cn.track(range(100), desc='inner')\n"
            "    for j in inner:\n"
            "        if j == 5:\n"
            "            ctl.stop(inner.task_id)",
            # 9: ... the outer loop ended stopped, not failed
            "o = ctl.get(outer.task_id)\n"
            "print(json.dumps({'status': str(o.status), 'failure': o.failure is not None,\n"
            "                  'inner': str(ctl.get(inner.task_id).status)}))",
            # 10: one loop left by a break, then another stopped in the same cell
            "first = cn.track(range(10), desc='first')\n"
            "for i in first:\n"
            "    if i == 2:\n"
            "        break\n"
            "second = cn.track(range(100), desc='second')\n"
            "for j in second:\n"
            "    if j == 5:\n"
            "        ctl.stop(second.task_id)",
            # 11: ... the first loop's break stands: succeeded, not ended by the stop after it
            "print(json.dumps({'first': str(ctl.get(first.task_id).status),\n"
            "                  'second': str(ctl.get(second.task_id).status)}))",
        ],
        tmp_path,
    )
    # a person's stop is not an error: one plain line on stdout (no error output, which
    # JupyterLab draws on its red stderr background), and the cell ends there
    assert _errors(out[1]) == []
    stdout = "".join(
        o["text"] for o in out[1] if o.get("output_type") == "stream" and o["name"] == "stdout"
    )
    assert stdout.startswith("convert: stopped by you at 101 / 10,000 (1%) after "), stdout
    assert "AFTER THE LOOP" not in stdout
    assert not [o for o in out[1] if o.get("name") == "stderr"]
    shown = [o for o in out[1] if o.get("output_type") == "display_data"]
    assert shown and "convert" in shown[0]["data"]["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in shown[0]["data"]
    # the output took the loop's final state (what a saved notebook shows)
    assert "stopped" in shown[0]["data"]["text/plain"]
    assert "stopped" in shown[0]["data"]["text/html"]
    (saved,) = [v for k, v in shown[0]["data"].items() if k.startswith("application/vnd.chongming")]
    assert [r["status"] for r in saved["rows"]] == ["stopped"]
    assert _json(out[2]) == {"status": "stopped", "done": 101, "executor": "loop"}
    (boom,) = _errors(out[3])
    assert boom["ename"] == "ValueError" and len(boom["traceback"]) > 1  # a real traceback
    assert _json(out[4]) == {"status": "failed", "message": "ValueError: bad row", "done": 3}
    kind = _json(out[5])
    assert kind["seen"] == list(range(6)) and kind["restored"] is True
    assert kind["msg"].startswith("kind: stopped by interrupt at 6 / 1,000 (1%)")
    (ki,) = _errors(out[6])
    assert ki["ename"] == "KeyboardInterrupt"
    twice = _json(out[7])
    assert twice["seen"] == list(range(6)) and twice["restored"] is True
    assert twice["status"] == "stopped"  # a person's interrupt, not a failure
    assert twice["attempts"] == 4
    # the outer loop of a stopped inner one is stopped too, not failed by its Stopped
    assert _errors(out[8]) == []
    assert _json(out[9]) == {"status": "stopped", "failure": False, "inner": "stopped"}
    assert _json(out[11]) == {"first": "succeeded", "second": "stopped"}


def test_without_a_front_end_a_text_bar_and_no_task(tmp_path: Path) -> None:
    out = _run(
        [
            "import os\nos.environ.pop('JPY_SESSION_NAME', None)\n"
            "import chongming_nb as cn, chongming_nb.control.kernel as k\n"
            "print(sum(cn.track(range(100), desc='plain')))\n"
            "print(k._controller is None)",
        ],
        tmp_path,
    )
    stdout = "".join(o["text"] for o in out[0] if o.get("name") == "stdout")
    stderr = "".join(o["text"] for o in out[0] if o.get("name") == "stderr")
    assert stdout.split() == ["4950", "True"]
    assert "plain: 100%|" in stderr and "100/100" in stderr
    assert not [o for o in out[0] if o.get("output_type") == "display_data"]


SCRIPT = textwrap.dedent(
    """
    import sys
    from chongming_nb import tqdm, trange
    items = list(tqdm(range(50), desc="conv", unit="files"))
    with tqdm(total=10, disable=None) as bar:
        for _ in trange(10, disable=True):
            bar.update()
    print(items == list(range(50)), bar.n)
    """
)


@pytest.mark.parametrize("runner", ["python", "ipython"])
def test_outside_jupyter(tmp_path: Path, runner: str) -> None:
    script = tmp_path / "convert.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, str(script)]
    if runner == "ipython":
        cmd = [sys.executable, "-m", "IPython", "--no-banner", "--quick", str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # a disabled bar counts nothing, as tqdm's (its update() returns at once)
    assert done.stdout.strip().splitlines()[-1] == "True 0"
    # the bar of the first loop on stderr; the disable=None bar (stderr is a pipe, not
    # a terminal) and the disable=True one draw nothing
    assert done.stderr.count("conv: 100%|") >= 1 and "50/50" in done.stderr
    assert "10/10" not in done.stderr


def test_inner_loops_that_leave_reuse_one_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each finished leave=False row used to leave an empty output behind: 40 inner loops
    # made 40 outputs, JupyterLab folded them under "Show more outputs" (its limit is 50)
    # with the outer loop's one line below them, and the saved notebook kept them all
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "nested.ipynb"))
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "tasks.db"))
    out = _run(
        [
            "import chongming_nb as cn\n"
            "for i in cn.track(range(40), desc='outer'):\n"
            "    for j in cn.track(range(3), desc=f'inner-{i}', leave=False):\n"
            "        pass",
            "for i in cn.track(range(2), desc='next-cell'):\n"
            "    for j in cn.track(range(2), desc=f'inner-next-{i}', leave=False):\n"
            "        pass",
        ],
        tmp_path,
    )
    assert not _errors(out[0]) and not _errors(out[1])
    shown = [o for o in out[0] if o.get("output_type") == "display_data"]
    texts = [o["data"].get("text/plain", "") for o in shown]
    # the outer row, and one output the inner rows took turns in (empty once they left)
    assert len(shown) == 2, texts
    assert "outer" in texts[0] and "succeeded" in texts[0]
    assert texts[1] == ""
    # a later cell never writes into an earlier cell's output
    nxt = [o for o in out[1] if o.get("output_type") == "display_data"]
    assert len(nxt) == 2 and "next-cell" in nxt[0]["data"]["text/plain"]
    assert "next-cell" not in "".join(texts)
