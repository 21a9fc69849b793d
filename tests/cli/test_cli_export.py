"""``chongming export`` keeps every digit of a time the store keeps (microseconds), the
same in CSV and JSON, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chongming_nb.cli.common import EXIT_OK
from chongming_nb.cli.main import main
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import open_store

S = TaskStatus
#: A time with a fraction in every microsecond digit, and one on a whole second.
FINE = datetime(2026, 2, 1, 9, 0, 1, 123456, tzinfo=UTC)
WHOLE = datetime(2026, 2, 1, 9, 0, 5, tzinfo=UTC)
LONG = timedelta(seconds=2, microseconds=1)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store holding a task timed to the microsecond ("fine") and one timed on whole
    seconds ("whole"), each with an attempt and a transition."""
    if request.param == "sqlite":
        url = str(tmp_path / "tasks.db")
        schema = None
    else:
        base: str = request.getfixturevalue("postgres_url")
        schema = f"t_{uuid.uuid4().hex[:16]}"
        url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    store = open_store(url)
    try:
        for task_id, at in (("fine", FINE), ("whole", WHOLE)):
            store.create(
                TaskSnapshot(
                    task_id=task_id,
                    name=task_id,
                    status=S.SUCCEEDED,
                    status_version=1,
                    attempt=1,
                    created_at=at,
                    started_at=at,
                    ended_at=at + LONG,
                )
            )
            store.save_attempt(
                AttemptRecord(task_id, 1, at, ended_at=at + LONG, outcome=S.SUCCEEDED)
            )
            store.append(Transition(task_id, S.PENDING, S.QUEUED, "user:start", "me", None, at, 1))
    finally:
        store.close()
    try:
        yield url
    finally:
        if schema is not None:
            from tests.stores.conftest import drop_pg_schema

            drop_pg_schema(url.split("?")[0], schema)


def _export(url: str, tmp_path: Path, fmt: str, what: str) -> dict[str, dict[str, str]]:
    """The exported rows by task id, as the file's text gives them."""
    out = tmp_path / f"{what}.{fmt}"
    code, _, err = run("--store", url, "export", "--format", fmt, "--what", what, "--out", str(out))
    assert code == EXIT_OK, err
    text = out.read_text(encoding="utf-8")
    rows = json.loads(text) if fmt == "json" else list(csv.DictReader(io.StringIO(text)))
    return {r["task_id"]: r for r in rows}


@pytest.mark.parametrize(
    ("what", "columns"),
    [
        ("tasks", ("created_at", "started_at", "ended_at")),
        ("attempts", ("started_at", "ended_at")),
        ("transitions", ("at",)),
    ],
)
def test_csv_and_json_keep_every_microsecond(
    store_url: str, tmp_path: Path, what: str, columns: tuple[str, ...]
) -> None:
    as_json = _export(store_url, tmp_path, "json", what)
    as_csv = _export(store_url, tmp_path, "csv", what)
    for task_id, at in (("fine", FINE), ("whole", WHOLE)):
        for column in columns:
            want = at + LONG if column == "ended_at" else at
            j, c = as_json[task_id][column], as_csv[task_id][column]
            # six digits of fraction in both, on every row (a whole second too)
            assert j == want.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), (what, column, j)
            assert c == want.strftime("%Y-%m-%d %H:%M:%S.%f+00:00"), (what, column, c)
            assert datetime.fromisoformat(j) == datetime.fromisoformat(c) == want
        if "duration" in as_json[task_id]:  # ended_at - started_at, to the microsecond
            assert as_json[task_id]["duration"] == "P0DT0H0M2.000001S"
            assert as_csv[task_id]["duration"] == "0 days 00:00:02.000001"


def test_csv_times_on_whole_seconds_keep_their_six_digits(tmp_path: Path) -> None:
    """Every row writes a time the same way, even a page whose times all fall on whole
    seconds (pandas would drop their fraction, and a reader would meet two formats)."""
    url = str(tmp_path / "tasks.db")
    store = open_store(url)
    store.create(TaskSnapshot(task_id="whole", name="whole", created_at=WHOLE))
    store.close()
    row = _export(url, tmp_path, "csv", "tasks")["whole"]
    assert row["created_at"] == "2026-02-01 09:00:05.000000+00:00"
    assert row["started_at"] == ""  # no time: an empty cell, as before
