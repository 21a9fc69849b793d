"""Store benchmarks (issue 5 item 8), each beside its peer in the same run.

1. End-to-end throughput of no-op tasks through ``Controller(store=SqliteStore(...))``:
   submit all, wait all, ``ctl.flush()`` (everything persisted) — beside
   dask.distributed ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``
   running the same number of no-op ``client.submit`` calls. Target >= 4,000 tasks/s.
   The controller runs ``repeats`` times (a fresh database each time) and reports its
   best run, as ``bench_throughput`` and ``timeit`` do (the machine is shared; the best
   run is the least disturbed one); every run's rate is in the row (``runs``).
   The row also carries ``recorder_cpu_us_per_task``: the recording side alone (the
   batches that run handed to the recorder, replayed through ``write_batch`` into a
   fresh SqliteStore, CPU time per task).
2. The same with ``PostgresStore`` (``CHONGMING_TEST_POSTGRES`` if set, else a throwaway
   cluster from ``scripts/pg_cluster.sh`` started and stopped here). Figure reported.
3. CLI-command-to-applied latency: a controller on a SQLite store runs a cooperative loop
   task; another process (``python -m chongming_nb.cli.main --store PATH pause ID``, then
   ``resume``) changes it; the time from launching the CLI process to the task's new
   status being visible in the store, read through a separate connection. Target p50 <=
   150 ms.

``run(size)`` returns rows ``{"metric", "ours", "peer", "ratio", "target", "pass",
"unit"}``; ``size`` is ``"tiny"`` (smoke test) or ``"full"``. Run alone with
``python benchmarks/bench_store.py [tiny|full]``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PG_SCRIPT = REPO / "scripts" / "pg_cluster.sh"

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 300, "cli_rounds": 2, "repeats": 1},
    "full": {"tasks": 10_000, "cli_rounds": 10, "repeats": 3},
}

THROUGHPUT_TARGET = 4000.0  # tasks/s
CLI_P50_TARGET_MS = 150.0


def _noop() -> None:
    return None


def _row(
    metric: str,
    ours: float | None,
    peer: float | None,
    target: str,
    passed: bool | None,
    unit: str,
    **extra: Any,
) -> dict[str, Any]:
    """A result row; ``extra`` keys (context: load, CPU time, splits) go to the JSON."""
    ratio = None
    if ours is not None and peer is not None and peer > 0:
        ratio = round(ours / peer, 3)
    return {
        "metric": metric,
        "ours": None if ours is None else round(ours, 1),
        "peer": None if peer is None else round(peer, 1),
        "ratio": ratio,
        "target": target,
        "pass": passed,
        "unit": unit,
        **extra,
    }


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# ------------------------------------------------------------------ throughput


def controller_throughput(
    store: Any, n: int, record: list[list[Any]] | None = None
) -> tuple[float, float]:
    """(tasks/s, CPU microseconds of this process per task) for ``n`` no-op tasks through
    a Controller writing to ``store``: from the first submit to the moment everything is
    persisted. Raises if a write failed. With ``record``, each batch the recorder thread
    writes is appended to it (for ``recorder_cpu``)."""
    import chongming_nb as cn
    from chongming_nb.control import persistence

    real = persistence.write_batch
    if record is not None:

        def keeping(store: Any, batch: Any, **options: Any) -> int:
            record.append(list(batch))
            return real(store, batch, **options)

        persistence.write_batch = keeping  # the controller looks it up per batch
    ctl = cn.Controller(store=store)
    try:
        c0 = time.process_time()
        t0 = time.perf_counter()
        handles = [ctl.submit(_noop) for _ in range(n)]
        for h in handles:
            if not h.wait(120):
                raise RuntimeError(f"task {h.id} did not finish within 120 s")
        if not ctl.flush(120):
            raise RuntimeError("the controller did not persist everything within 120 s")
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
        if ctl.persist_failures:
            raise RuntimeError(f"{ctl.persist_failures} store writes failed")
    finally:
        persistence.write_batch = real
        ctl.close()
    counts = store.counts()
    done = sum(v for k, v in counts.items() if k.value == "succeeded")
    if done != n:
        raise RuntimeError(f"the store holds {done} succeeded tasks, expected {n}")
    return n / elapsed, cpu * 1e6 / n


def recorder_cpu(batches: list[list[Any]], n: int, work: Path, rounds: int = 3) -> float:
    """CPU microseconds per task of the recording side alone: ``write_batch`` over the
    batches a real run handed to the recorder, into a fresh SqliteStore each round
    (median of ``rounds``; the controller's own cost is not in it)."""
    from chongming_nb.control.persistence import write_batch
    from chongming_nb.stores import SqliteStore

    samples = []
    for i in range(rounds):
        store = SqliteStore(work / f"recorder-{i}.db")
        try:
            c0 = time.process_time()
            failed = sum(write_batch(store, b) for b in batches)
            samples.append((time.process_time() - c0) * 1e6 / n)
        finally:
            store.close()
        if failed:
            raise RuntimeError(f"{failed} writes failed replaying the recorded batches")
    return statistics.median(samples)


def dask_throughput(n: int) -> float:
    """Tasks/s for ``n`` no-op ``client.submit`` calls on a 2-process LocalCluster
    (cluster start-up excluded, like the controller's construction)."""
    import cloudpickle  # type: ignore[import-untyped]
    from dask.distributed import Client, LocalCluster, wait

    module = sys.modules[__name__]
    if __name__ != "__main__":  # workers need not be able to import benchmarks/
        cloudpickle.register_pickle_by_value(module)

    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # teardown chatter (closed comms) is not a result
    try:
        return _dask_throughput(n, Client, LocalCluster, wait)
    finally:
        quiet.setLevel(level)


def _dask_throughput(n: int, Client: Any, LocalCluster: Any, wait: Any) -> float:
    with (
        _no_port_warning(),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.submit(_noop_dask, pure=False).result()  # workers up, function shipped
        t0 = time.perf_counter()
        futures = [client.submit(_noop_dask, i, pure=False) for i in range(n)]
        wait(futures)
        elapsed = time.perf_counter() - t0
        bad = [f for f in futures if f.status != "finished"]
        if bad:
            raise RuntimeError(f"{len(bad)} dask tasks did not finish")
        del futures
    return n / elapsed


@contextlib.contextmanager
def _no_port_warning() -> Iterator[None]:
    """dashboard_address=None still warns when another cluster holds port 8787."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]ort .* is already in use")
        yield


def _noop_dask(_: int = 0) -> None:
    return None


# --------------------------------------------------------------------- postgres


@contextlib.contextmanager
def postgres_url() -> Iterator[tuple[str | None, str]]:
    """(url, how) — url None when PostgreSQL cannot be had; ``how`` says why/where."""
    env = os.environ.get("CHONGMING_TEST_POSTGRES")
    if env:
        yield env, "CHONGMING_TEST_POSTGRES"
        return
    pg_dir = tempfile.mkdtemp(prefix="chongming-pg-bench.", dir="/tmp")
    os.rmdir(pg_dir)  # pg_cluster.sh wants a new (or empty) directory it lays out
    try:
        proc = subprocess.run(
            ["bash", str(PG_SCRIPT), "start", pg_dir],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        subprocess.run(["bash", str(PG_SCRIPT), "stop", pg_dir], capture_output=True, check=False)
        yield None, f"pg_cluster.sh could not run: {exc}"
        return
    try:
        if proc.returncode != 0 or not proc.stdout.strip():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            yield None, f"pg_cluster.sh start failed: {last}"
        else:
            yield proc.stdout.strip(), "throwaway cluster (scripts/pg_cluster.sh)"
    finally:
        subprocess.run(
            ["bash", str(PG_SCRIPT), "stop", pg_dir], capture_output=True, check=False, timeout=120
        )


# ---------------------------------------------------------------- CLI latency


def _wait_status(read: Callable[[], str], want: str, timeout: float) -> float:
    """Poll the store until the status is ``want``; returns perf_counter() then."""
    deadline = time.perf_counter() + timeout
    while True:
        if read() == want:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"status did not become {want} within {timeout} s")
        time.sleep(0.002)


def _cli_env(workdir: Path) -> dict[str, str]:
    """The CLI's environment: no CHONGMING_STORE, and a bytecode cache. An installed
    package has its .pyc files (pip compiles at install); a source checkout run with
    PYTHONDONTWRITEBYTECODE=1 would recompile every module at every CLI start, which
    is not what a user's shell pays. The cache goes to a temporary folder, not the
    checkout."""
    env = dict(os.environ)
    env.pop("CHONGMING_STORE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def cli_latency(rounds: int, workdir: Path) -> tuple[list[float], list[float]]:
    """Milliseconds from launching ``chongming pause|resume`` in another process to the
    task's new status in the store, ``rounds`` pauses and ``rounds`` resumes; and, for
    the same commands, from the moment the CLI queued the command (its ``created_at``)
    to that status (the controller's share: dispatcher tick, claim, apply, commit)."""
    import chongming_nb as cn
    from chongming_nb.stores import SqliteStore

    path = workdir / "cli.db"
    ctl = cn.Controller(store=SqliteStore(path), owner=f"bench:{os.getpid()}:-")
    stop = threading.Event()

    def loop(ctx: Any) -> int:
        n = 0
        while not stop.is_set():
            ctx.checkpoint()
            n += 1
            stop.wait(0.005)
        return n

    reader = SqliteStore(path)
    samples: list[float] = []
    applied: list[float] = []
    h = ctl.submit(loop, name="cli-latency-loop")
    try:
        ctl.flush()

        def status() -> str:
            snap = reader.get(h.id)
            return "" if snap is None else snap.status.value

        _wait_status(status, "running", 30)
        env = _cli_env(workdir)
        # warm up: the bytecode cache an installed package has (see _cli_env)
        subprocess.run(
            [sys.executable, "-m", "chongming_nb.cli.main", "--store", str(path), "status", h.id],
            capture_output=True,
            env=env,
            check=True,
            timeout=60,
        )
        for _ in range(rounds):
            for verb, want in (("pause", "paused"), ("resume", "running")):
                t0 = time.perf_counter()
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "chongming_nb.cli.main",
                        "--store",
                        str(path),
                        verb,
                        h.id,
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                )
                try:
                    t1 = _wait_status(status, want, 30)
                    seen_at = datetime.now(UTC)
                finally:
                    _out, err = proc.communicate(timeout=60)
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"chongming {verb} exited {proc.returncode}: {err.decode(errors='replace')}"
                    )
                samples.append((t1 - t0) * 1000.0)
                queued = [c for c in reader.commands(h.id) if c.verb == verb][-1].created_at
                if queued is not None:
                    applied.append((seen_at - queued).total_seconds() * 1000.0)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            h.resume()
        ctl.flush()
        ctl.close()
        reader.close()
    return samples, applied


def cli_startup_ms(rounds: int, workdir: Path) -> float:
    """Median ms to start an interpreter and import the CLI (a floor for the latency)."""
    times = []
    env = _cli_env(workdir)
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import chongming_nb.cli.main"], check=True, env=env)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


# -------------------------------------------------------------------------- run


def run(size: str) -> list[dict[str, Any]]:
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    cfg = SIZES[size]
    n = cfg["tasks"]
    rows: list[dict[str, Any]] = []
    from chongming_nb.stores import SqliteStore

    work = Path(tempfile.mkdtemp(prefix="chongming-bench-store."))
    try:
        # peers measured in the same run; dask first, then its processes are gone
        load = _load()
        peer = dask_throughput(n)
        batches: list[list[Any]] = []
        runs: list[tuple[float, float]] = []
        for i in range(max(1, cfg["repeats"])):
            gc.collect()  # not the previous run's garbage (the collector stays on)
            store = SqliteStore(work / f"tp-{i}.db")
            try:  # the first run's batches are replayed by recorder_cpu
                runs.append(controller_throughput(store, n, batches if i == 0 else None))
            finally:
                store.close()
        sqlite_tps, sqlite_cpu = max(runs)
        recorder_us = recorder_cpu(batches, n, work)
        del batches
        rows.append(
            _row(
                f"throughput, {n} no-op tasks: Controller+SqliteStore vs dask LocalCluster",
                sqlite_tps,
                peer,
                f">= {THROUGHPUT_TARGET:.0f} tasks/s",
                sqlite_tps >= THROUGHPUT_TARGET,
                "tasks/s",
                cpu_us_per_task=round(sqlite_cpu, 1),
                recorder_cpu_us_per_task=round(recorder_us, 1),
                runs=[round(r) for r, _ in runs],
                load_1min=load,
            )
        )
        with postgres_url() as (url, how):
            if url is None:
                if size == "full":
                    raise RuntimeError(f"PostgreSQL is needed for the full run: {how}")
                rows.append(
                    _row(
                        f"throughput, {n} no-op tasks: Controller+PostgresStore SKIPPED ({how})",
                        None,
                        peer,
                        "figure reported",
                        None,
                        "tasks/s",
                        skipped=how,
                    )
                )
            else:
                from chongming_nb.stores.postgres import PostgresStore

                schema = f"bench_{uuid.uuid4().hex[:12]}"
                pg = PostgresStore(url, schema=schema)
                try:
                    pg_tps, pg_cpu = controller_throughput(pg, n)
                finally:
                    with contextlib.suppress(Exception):
                        pg.drop_schema()
                    pg.close()
                rows.append(
                    _row(
                        f"throughput, {n} no-op tasks: Controller+PostgresStore ({how}) "
                        "vs dask LocalCluster",
                        pg_tps,
                        peer,
                        "figure reported",
                        True,
                        "tasks/s",
                        cpu_us_per_task=round(pg_cpu, 1),
                        load_1min=_load(),
                    )
                )
        load = _load()
        samples, applied = cli_latency(cfg["cli_rounds"], work)
        floor = cli_startup_ms(max(3, cfg["cli_rounds"] // 2), work)
        p50 = statistics.median(samples)
        rows.append(
            _row(
                f"CLI pause/resume -> status in store, p50 of {len(samples)} "
                "(peer: interpreter start + CLI import alone)",
                p50,
                floor,
                f"<= {CLI_P50_TARGET_MS:.0f} ms",
                p50 <= CLI_P50_TARGET_MS,
                "ms",
                samples_ms=[round(x, 1) for x in samples],
                load_1min=load,
            )
        )
        p95 = sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]
        rows.append(_row("CLI pause/resume -> status in store, p95", p95, floor, "-", None, "ms"))
        if applied:
            rows.append(
                _row(
                    "CLI command queued -> status in store (controller's share), p50",
                    statistics.median(applied),
                    None,
                    "-",
                    None,
                    "ms",
                    samples_ms=[round(x, 1) for x in applied],
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    import json

    for r in run(sys.argv[1] if len(sys.argv) > 1 else "full"):
        print(json.dumps(r))
