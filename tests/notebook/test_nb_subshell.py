"""Per-comm subshell routing (notebook/_subshell.py) against the installed ipykernel's
own comm class: without it, a comm that last published from the main shell sends an
incoming message to the main shell whatever subshell the front end used."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from ipykernel import version_info
from ipykernel.comm.comm import BaseComm

from chongming_nb.notebook import _subshell
from chongming_nb.notebook._subshell import route_to_sender
from chongming_nb.testing.widgets import recording_comms


def published_from_main_shell() -> Any:
    comm = BaseComm(target_name="chongming-test", primary=False)
    # what BaseComm.publish_msg records when a cell (or a thread) sends a message: the
    # parent header of the main shell has no subshell id
    comm._reply_subshell_id = None
    return comm


def test_ipykernel_still_replaces_the_front_ends_subshell() -> None:
    """The behaviour being worked around (fails if a new ipykernel stops doing it)."""
    assert version_info[0] in _subshell.CHECKED_MAJOR
    assert published_from_main_shell()._reply_subshell_for({"method": "custom"}, "sub-1") is None


def test_routed_comm_keeps_the_front_ends_subshell() -> None:
    comm = published_from_main_shell()
    assert route_to_sender(comm) is True
    assert comm._reply_subshell_for({"method": "custom"}, "sub-1") == "sub-1"
    assert comm._reply_subshell_for({"method": "custom"}, None) is None  # main stays main
    # a comm that last published from a subshell still answers there (ipykernel's rule)
    comm._reply_subshell_id = "sub-2"
    assert comm._reply_subshell_for({"method": "custom"}, "sub-1") == "sub-2"
    assert route_to_sender(comm) is True  # idempotent: not wrapped twice
    comm._reply_subshell_id = None
    assert comm._reply_subshell_for({"method": "custom"}, "sub-3") == "sub-3"


@pytest.mark.parametrize("major", [6, 8])
def test_other_ipykernel_versions_are_left_alone(major: int) -> None:
    comm = published_from_main_shell()
    assert route_to_sender(comm, major=major) is False
    assert comm._reply_subshell_for({}, "sub-1") is None


def test_a_comm_without_the_private_method_is_left_alone() -> None:
    class Plain:
        pass

    assert route_to_sender(Plain()) is False
    assert route_to_sender(None) is False


def test_every_table_routes_its_comm(fctl: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from chongming_nb.notebook import widget

    routed: list[Any] = []
    monkeypatch.setattr(widget, "route_to_sender", lambda comm: routed.append(comm) or True)
    fctl.add("a", status="running")
    with recording_comms():
        t = widget.TaskTable(fctl, autoflush=False)
        assert routed == [t.comm] and t.comm is not None
        t.close()


def test_outside_a_kernel_a_table_does_not_import_ipykernel() -> None:
    """A script (or a benchmark) that makes a table outside a kernel: the routing is not
    needed there, and asking ipykernel's version must not import it (~0.13 s)."""
    code = (
        "import sys\n"
        "from chongming_nb.testing.widgets import FakeController, recording_comms\n"
        "from chongming_nb.notebook.widget import TaskTable\n"
        "assert 'ipykernel' not in sys.modules, 'imported before the table'\n"
        "from chongming_nb.runtime.clock import SystemClock\n"
        "ctl = FakeController(clock=SystemClock())\n"
        "ctl.add('a', status='running')\n"
        "with recording_comms():\n"
        "    TaskTable(ctl, kind='board').close()\n"
        "print('ipykernel' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_version_is_read_from_the_loaded_ipykernel(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _subshell._ipykernel_major() == version_info[0]  # loaded by this module
    monkeypatch.delitem(sys.modules, "ipykernel")
    assert _subshell._ipykernel_major() is None
