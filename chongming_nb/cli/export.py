"""The commands that write the store out or shrink it: ``export`` (CSV, JSON or
Parquet, streamed a page of tasks at a time) and ``prune``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from chongming_nb.cli.common import (
    _STREAM_PAGE,
    EXIT_OK,
    EXIT_USAGE,
    CliBase,
    CliError,
    _WallClock,
    _when,
    clean,
    statuses_of,
)
from chongming_nb.core.models import iso_utc
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import TaskQuery, TaskStore

#: A time in CSV: every digit the store keeps (microseconds), on every row; pandas
#: would drop the fraction of a page whose times all fall on whole seconds. The frames'
#: time columns are all datetime64[us, UTC] (``chongming_nb.frames``).
_CSV_TIME = "%Y-%m-%d %H:%M:%S.%f+00:00"


class _Export:
    """A file that DataFrames are appended to, one after the other, as one CSV, JSON
    array of records or Parquet file (written as they come: one frame in memory).
    Times keep the store's microseconds in all three: CSV ``2026-03-01
    12:00:01.123456+00:00``, JSON ``2026-03-01T12:00:01.123456Z`` (pandas' JSON
    default would cut them to milliseconds), Parquet timestamp[us, UTC]."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self.parts = 0
        self.fh: Any = None
        self.parquet: Any = None

    def __enter__(self) -> _Export:
        if self.fmt != "parquet":
            self.fh = open(self.path, "w", encoding="utf-8", newline="")
        return self

    def write(self, df: Any) -> None:
        if self.fmt == "csv":
            df.to_csv(self.fh, index=False, header=self.parts == 0, date_format=_CSV_TIME)
        elif self.fmt == "json":
            text = df.to_json(orient="records", date_format="iso", date_unit="us", indent=1)
            body = text.strip()[1:-1].strip("\n")
            if body:
                self.fh.write(("[\n" if self.parts == 0 else ",\n") + body)
                self.parts += 1
            return
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self.parquet is None:
                table = pa.Table.from_pandas(df, preserve_index=False)
                self.parquet = pq.ParquetWriter(self.path, table.schema)
            else:  # the first part's schema (a part of empty lists would guess another)
                table = pa.Table.from_pandas(df, schema=self.parquet.schema, preserve_index=False)
            self.parquet.write_table(table)
        self.parts += 1

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            if self.fmt == "json":
                self.fh.write("\n]" if self.parts else "[]")
            self.fh.close()
        if self.parquet is not None:
            self.parquet.close()


#: The files SQLite keeps beside a database (its write-ahead log, shared memory, journal).
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def _store_file_named(store: TaskStore, out_path: str) -> str | None:
    """The store's database file or a side file of it that ``out_path`` names (however
    spelled: relative, ``..``, a symlink, a hard link), or None (a PostgreSQL store has
    no file)."""
    db = getattr(store, "path", None)
    if db is None:
        return None
    out = os.path.realpath(out_path)
    for suffix in _SIDE_FILES:
        own = os.path.realpath(f"{db}{suffix}")
        if out == own:
            return own
        try:
            if os.path.samefile(out, own):
                return own
        except OSError:  # one of them does not exist: not the same file
            continue
    return None


class Exporting(CliBase):
    def _export_frames(self, what: str, store: TaskStore) -> Iterator[Any]:
        """The export as DataFrames of at most ``_STREAM_PAGE`` tasks each, oldest task
        first: keyset pages of tasks, each page's frame read in one query when the store
        builds frames (so memory holds one page, however big the store)."""
        from chongming_nb import frames

        columns = getattr(store, "frame_columns", None)
        q = TaskQuery(order="oldest", limit=_STREAM_PAGE)
        after: str | None = None
        while True:
            snaps, after = store.page(q, after=after)
            if snaps:
                names = {s.task_id: s.name for s in snaps}
                kind = what
                if columns is not None:
                    df = frames.frame_from_columns(
                        kind, columns(kind, TaskQuery(ids=frozenset(names)))
                    )
                    if kind == "tasks":  # read newest first: this page oldest first
                        df = df.iloc[::-1].reset_index(drop=True)
                elif kind == "tasks":
                    df = frames.snapshots_frame(snaps)
                elif kind == "attempts":
                    recs = [r for s in snaps for r in store.attempts(s.task_id)]
                    df = frames.attempts_frame(recs, names)
                else:
                    trs = [t for s in snaps for t in store.history(s.task_id)]
                    df = frames.transitions_frame(trs, names)
                yield df
            if after is None:
                return

    def cmd_export(self) -> int:
        a = self.args
        parts = self._export_frames(a.what, self.store)  # the store opens (or is refused) first
        out_path = a.out
        parent = os.path.dirname(os.path.abspath(out_path))
        if not os.path.isdir(parent):
            raise CliError(EXIT_USAGE, f"--out {out_path}: directory {parent} does not exist")
        own = _store_file_named(self.store, out_path)
        if own is not None:  # opening it for writing would truncate the store
            raise CliError(
                EXIT_USAGE, f"--out {out_path}: is the store's own file ({own}); nothing written"
            )
        rows = 0
        try:
            with _Export(out_path, a.format) as sink:
                for df in parts:
                    if len(df):
                        sink.write(df)
                        rows += len(df)
                if rows == 0:
                    sink.write(self._empty_frame(a.what))
        except OSError as exc:
            raise CliError(EXIT_USAGE, f"cannot write {out_path}: {exc}") from exc
        summary = {"rows": rows, "what": a.what, "format": a.format, "out": out_path}
        if a.json:
            self.emit_json(summary)
        else:
            self.out.write(f"wrote {rows} {a.what} rows to {clean(out_path)} ({a.format})\n")
        return EXIT_OK

    def cmd_prune(self) -> int:
        """Delete finished tasks older than ``--older-than`` with all their history (one
        transaction; never a task that has not finished)."""
        a = self.args
        statuses: frozenset[TaskStatus] | None = None
        if a.status:
            statuses = statuses_of(a.status, TERMINAL, "finished statuses")
            live = sorted(s.value for s in statuses if s not in TERMINAL)
            if live:
                raise CliError(EXIT_USAGE, f"--status {live[0]}: only finished tasks are pruned")
        cutoff = _WallClock().now() - a.older_than
        counts = self.store.purge(older_than=cutoff, status=statuses, dry_run=a.dry_run)
        if a.json:
            self.emit_json({"dry_run": a.dry_run, "older_than": iso_utc(cutoff), **counts})
            return EXIT_OK
        verb = "would delete" if a.dry_run else "deleted"
        rest = ", ".join(f"{counts[t]} {t}" for t in counts if t != "tasks")
        self.out.write(
            f"{verb} {counts['tasks']} finished tasks ended before {_when(cutoff)} ({rest})\n"
        )
        return EXIT_OK

    @staticmethod
    def _empty_frame(what: str) -> Any:
        from chongming_nb import frames

        if what == "tasks":
            return frames.snapshots_frame([])
        if what == "attempts":
            return frames.attempts_frame([])
        return frames.transitions_frame([])
