"""History at scale (issue 21): frames, lists and bytes per task on big SQLite stores.

1. ``cn.open_store(db).snapshots_df()`` / ``attempts_df()`` / ``transitions_df()`` (about
   five transitions a task: 4.8 million rows at a million tasks) on generated histories
   of each size in ``tasks`` (``chongming_nb.testing.history``, made once and kept
   under the temp directory: ``common.generated_store``), each beside ``pd.read_sql``
   of the same rows and the ``sqlite3`` shell printing them, in the same run
   (``bench_frames.store_rows``).
   Target: <= 1.2x ``pd.read_sql``.
2. ``chongming ps --limit 20`` (in this process: parsing, opening the store read-only,
   one page, the table) on the largest store beside the same on an empty store, and
   the first page of the REST list (``store.page`` of the handler's default 500 rows +
   ``store.counts()``, what the handler reads) beside the same on a store of 1,000
   tasks (an empty store lists nothing). Target: <= 1.5x the small store.
3. Bytes of SQLite store per finished no-op task: ``bytes_tasks`` no-op tasks through a
   ``Controller``; the file's growth over the empty store's, each after a checkpoint
   and a VACUUM. Target: <= 800 bytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from benchmarks.bench_frames import store_rows
from benchmarks.common import generated_store, result, timed
from benchmarks.sizes import size_of

#: The REST list's default page (``server.handlers.DEFAULT_LIMIT``; not imported: it
#: would load the Jupyter server).
REST_PAGE = 500
#: The store frames measured at every size (``events_df`` is ``transitions_df``).
_FRAMES = ("snapshots_df", "attempts_df", "transitions_df")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _ps(path: Path) -> float:
    from chongming_nb.cli.main import main

    out = io.StringIO()

    def call() -> None:
        if main(["--store", str(path), "ps", "--limit", "20"], out=out, err=io.StringIO()):
            raise RuntimeError(f"ps failed on {path}")

    return timed(call)


def _first_page(path: Path) -> float:
    from chongming_nb.stores import SqliteStore, TaskQuery

    store = SqliteStore(path, readonly=True)
    try:
        return timed(lambda: (store.page(TaskQuery(limit=REST_PAGE)), store.counts()))
    finally:
        store.close()


def list_rows(tasks: int, repeats: int) -> list[dict[str, Any]]:
    big = generated_store(tasks)
    rows = []
    for what, fn, small, peer_name in (
        ("chongming ps --limit 20", _ps, 0, "an empty store"),
        # an empty store lists nothing: the page's peer is a store whose page is full
        (
            f"REST list first page ({REST_PAGE} rows) + status counts",
            _first_page,
            2 * REST_PAGE,
            f"a store of {2 * REST_PAGE:,} tasks",
        ),
    ):
        empty = generated_store(small)
        fn(big), fn(empty)  # warm: imports, the file's pages in the OS cache
        samples: dict[Path, list[float]] = {big: [], empty: []}
        for _ in range(repeats):
            for path, got in samples.items():
                got.append(fn(path) * 1e3)
        o, p = min(samples[big]), min(samples[empty])
        metric = f"{what}: store of {tasks:,} tasks vs {peer_name}"
        rows.append(
            result(
                metric,
                round(o, 2),
                "ms",
                target=f"<= 1.5x {peer_name}",
                passed=o <= 1.5 * p,
                peer={peer_name: round(p, 2)},
                ratio=o / p if p else None,
                samples_ms={str(k): [round(x, 2) for x in v] for k, v in samples.items()},
                load_1min=_load(),
            )
        )
    return rows


def bytes_row(n: int) -> dict[str, Any]:
    from chongming_nb.testing.store_size import bytes_per_noop_task

    per_task, empty = bytes_per_noop_task(n)
    return result(
        f"SQLite store per finished no-op task ({n:,} tasks through a Controller; "
        "growth over the empty store, after a checkpoint and VACUUM)",
        round(per_task, 1),
        "bytes",
        target="<= 800 bytes",
        passed=per_task <= 800,
        empty_store_bytes=empty,
        load_1min=_load(),
    )


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "history")
    sizes, repeats = [int(n) for n in p["tasks"]], int(p["repeats"])
    rows: list[dict[str, Any]] = [bytes_row(int(p["bytes_tasks"]))]
    for n in sizes:
        rows += store_rows(n, repeats, _FRAMES)
    rows += list_rows(max(sizes), int(p["list_repeats"]))
    return rows
