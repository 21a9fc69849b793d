"""Output capture is linear in the bytes written whatever the line endings: ``\\r``
redraws keep the last state of the line (like a terminal), a line without a newline
does not make every later write copy it again, and one line never holds more than
``MAX_LINE_CHARS``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from tqdm import tqdm

from chongming_nb import Controller, TaskContext
from chongming_nb.runtime.output import MAX_LINE_CHARS, LineAssembler


def _lines(*writes: str) -> list[str]:
    out: list[str] = []
    asm = LineAssembler("stdout", lambda s, line, lvl: out.append(line))
    for w in writes:
        asm.write(w)
    asm.flush()
    return out


def test_carriage_returns_keep_the_last_state_of_the_line() -> None:
    assert _lines("10%\r20%\r30%\n") == ["30%"]
    assert _lines("10%", "\r", "20%", "\r", "done\n") == ["done"]
    assert _lines("windows\r\n", "line two\r\n") == ["windows", "line two"]
    assert _lines("kept\r", "\n") == ["kept"]  # a return then a newline keeps the line
    assert _lines("a\n\nb") == ["a", "", "b"]
    assert _lines("tail without newline") == ["tail without newline"]
    assert _lines("\r\r") == []


def test_a_line_without_newline_is_cut_at_the_limit_not_copied_again_and_again() -> None:
    chunk = "x" * 1024
    asm_lines: list[str] = []
    asm = LineAssembler("stdout", lambda s, line, lvl: asm_lines.append(line))
    for _ in range(8 * 1024):  # 8 MB, no newline
        asm.write(chunk)
        # what is held never grows past the limit: no write copies more than that
        assert asm._size <= MAX_LINE_CHARS
    asm.flush()
    (line,) = asm_lines
    cut = 8 * 1024 * 1024 - MAX_LINE_CHARS
    assert line == "x" * MAX_LINE_CHARS + f" … [{cut} more characters not kept]"


def test_tqdm_with_mininterval_zero_in_a_task_keeps_one_line(
    make_ctl: Callable[..., Controller],
) -> None:
    n = 20_000

    def bar(ctx: TaskContext) -> int:
        total = 0
        for i in tqdm(range(n), mininterval=0, miniters=1, file=sys.stderr, ncols=80):
            total += i
        return total

    ctl = make_ctl()
    h = ctl.submit(bar)
    assert h.result(timeout=120) == sum(range(n))
    lines = [r.line for r in h.logs() if r.stream == "stderr"]
    # the old capture glued every redraw into one ~1.6 MB line (and took quadratic time
    # doing it); now the bar's last state, as a terminal shows it
    assert len(lines) == 1, [len(x) for x in lines]
    assert lines[0].startswith("100%") and f"{n}/{n}" in lines[0]
    assert len(lines[0]) <= 80
