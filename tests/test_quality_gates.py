"""The plumbing: the README's two commands, CI calling the test command, the throwaway
PostgreSQL cluster, the test command's exit codes and the run command actually serving
JupyterLab. (ruff, mypy and the import contracts run as gates in scripts/test.sh itself.)"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(```|~~~)")


def readme_commands(text: str) -> list[str]:
    """The commands of the README's opening block, checking what may stand before it:
    the title and at most one sentence."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    assert i < len(lines) and lines[i].startswith("# "), "README must open with a '# ' title"
    i += 1
    prose: list[str] = []
    while i < len(lines) and not FENCE.match(lines[i]):
        prose.append(lines[i].strip())
        i += 1
    assert i < len(lines), "README has no fenced block of commands"
    sentence = " ".join(p for p in prose if p)
    assert not sentence.startswith(("#", "-", "*", ">", "|")), (
        f"only one sentence may stand between the title and the commands, found: {sentence!r}"
    )
    ends = re.findall(r"[.!?](?:\s|$)", sentence)
    assert len(ends) <= 1, f"more than one sentence before the commands: {sentence!r}"
    fence = FENCE.match(lines[i])
    assert fence is not None
    i += 1
    block: list[str] = []
    while i < len(lines) and not lines[i].startswith(fence.group(1)):
        block.append(lines[i])
        i += 1
    assert i < len(lines), "README's command block is not closed"
    return [line.strip() for line in block if line.strip()]


def ci_commands(text: str) -> list[str]:
    """The lines of .ci/run that do something, other than strict mode and changing folder."""
    commands = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("set ", "cd ")):
            continue
        commands.append(line)
    return commands


def is_single_command(line: str) -> bool:
    words = shlex.split(line)
    separators = {"&&", "||", ";", "|", "&"}
    return (
        bool(words)
        and not separators.intersection(words)
        and not line.endswith("\\")
        and not any(sep in line for sep in ("&&", "||", ";", "`", "$("))
    )


def split_readme_commands() -> tuple[str, str]:
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 2, f"README must open with exactly two commands, found {commands}"
    tests = [c for c in commands if "test" in c]
    assert len(tests) == 1, f"exactly one of the two commands must be the test command: {commands}"
    run = next(c for c in commands if c not in tests)
    return run, tests[0]


# --- the README and CI ---------------------------------------------------------------------


def test_readme_opens_with_exactly_two_one_line_commands() -> None:
    run, test = split_readme_commands()
    assert run == "./scripts/run.sh"
    assert test == "./scripts/test.sh"
    for command in (run, test):
        assert is_single_command(command), f"{command!r} is not one plain command"
        script = ROOT / shlex.split(command)[0]
        assert script.is_file(), f"{command!r} names a missing file"
        assert os.access(script, os.X_OK), f"{script} is not executable"


def test_readme_parser_rejects_a_second_sentence_and_a_third_command() -> None:
    good = "# t\n\nOne sentence.\n\n```bash\n./a\n./b\n```\n"
    assert readme_commands(good) == ["./a", "./b"]
    with pytest.raises(AssertionError, match="more than one sentence"):
        readme_commands("# t\n\nOne. Two.\n\n```\n./a\n./b\n```\n")
    with pytest.raises(AssertionError, match="title"):
        readme_commands("Intro.\n```\n./a\n```\n")
    with pytest.raises(AssertionError, match="only one sentence"):
        readme_commands("# t\n\n## Section\n```\n./a\n```\n")
    assert not is_single_command("./a && ./b")
    assert not is_single_command("./a; ./b")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, test = split_readme_commands()
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    assert ci_commands(text) == [test]


def test_ci_command_parser_ignores_only_comments_strict_mode_and_cd() -> None:
    text = "#!/usr/bin/env bash\nset -euo pipefail\ncd x\n# c\n./scripts/test.sh\necho hi\n"
    assert ci_commands(text) == ["./scripts/test.sh", "echo hi"]


def test_scripts_are_executable_in_git_and_parse() -> None:
    scripts = [*sorted((ROOT / "scripts").glob("*.sh")), ROOT / ".ci" / "run"]
    assert {p.name for p in scripts} >= {
        "setup.sh",
        "test.sh",
        "run.sh",
        "pg_cluster.sh",
        "build_labextension.sh",
        "run",
    }
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n"), script
    if (ROOT / ".git").exists():
        listed = subprocess.run(
            ["git", "ls-files", "-s", "--", *(str(p.relative_to(ROOT)) for p in scripts)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for line in listed.splitlines():
            mode, _, _, path = line.split(maxsplit=3)
            assert mode == "100755", f"{path} is committed without its executable bit"


# --- the throwaway PostgreSQL cluster -------------------------------------------------------


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.postgres
def test_pg_cluster_starts_serves_and_stops() -> None:
    psycopg = pytest.importorskip("psycopg")
    # a new folder in the system temp dir: the postgres user must be able to reach it, which
    # pytest's private tmp_path does not allow when the tests run as root
    cluster = Path(tempfile.gettempdir()) / f"chongming-pg-test-{uuid.uuid4().hex[:12]}"
    script = str(ROOT / "scripts" / "pg_cluster.sh")
    url = subprocess.run(
        ["bash", script, "start", str(cluster), "plumbing_db"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    try:
        match = re.fullmatch(r"postgresql://postgres:(\w+)@127\.0\.0\.1:(\d+)/plumbing_db", url)
        assert match, url
        password, port = match.group(1), int(match.group(2))
        again = subprocess.run(
            ["bash", script, "url", str(cluster)], check=True, capture_output=True, text=True
        )
        assert again.stdout.strip() == url
        with psycopg.connect(url, connect_timeout=10) as conn:
            row = conn.execute("select current_database(), current_setting('listen_addresses')")
            assert row.fetchone() == ("plumbing_db", "127.0.0.1")
        wrong = url.replace(password, "not-the-password")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(wrong, connect_timeout=10)
        refused = subprocess.run(
            ["bash", script, "start", str(cluster)], capture_output=True, text=True
        )
        assert refused.returncode != 0
        assert "not empty" in refused.stderr
    finally:
        subprocess.run(["bash", script, "stop", str(cluster)], check=True, timeout=120)
    assert not cluster.exists()
    assert not port_open(port)


def test_pg_cluster_refuses_to_delete_a_folder_it_did_not_make(tmp_path: Path) -> None:
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "file.txt").write_text("keep me")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "pg_cluster.sh"), "stop", str(keep)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "not deleting" in result.stderr
    assert (keep / "file.txt").read_text() == "keep me"


# --- the test command's exit codes ----------------------------------------------------------


def run_test_command(tests_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYTEST_ADDOPTS"}}
    env.update(CHONGMING_SKIP_GATES="1", CHONGMING_TEST_POSTGRES="postgresql://unused")
    return subprocess.run(
        [str(ROOT / "scripts" / "test.sh"), str(tests_dir), "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def last_line(output: str) -> str:
    return [line for line in output.splitlines() if line.strip()][-1]


@pytest.mark.parametrize(
    ("body", "code", "closing"),
    [
        ("def test_ok():\n    assert 1 + 1 == 2\n", 0, r"1 passed"),
        ("def test_bad():\n    assert 1 + 1 == 3\n", 1, r"1 failed"),
        ("", 5, r"no tests ran"),
    ],
    ids=["pass", "fail", "no-tests"],
)
def test_test_command_returns_pytests_code_and_ends_with_its_summary(
    tmp_path: Path, body: str, code: int, closing: str
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_sample.py").write_text(body)
    result = run_test_command(suite)
    assert result.returncode == code, result.stdout + result.stderr
    assert re.search(closing, last_line(result.stdout)), result.stdout


# --- the run command ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_command_serves_jupyterlab_on_loopback(tmp_path: Path) -> None:
    port, token = free_port(), "plumbing-test-token"
    env = dict(os.environ, CHONGMING_PORT=str(port), CHONGMING_TOKEN=token)
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "run.sh"), "--ServerApp.shutdown_no_activity_timeout=120"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        printed_url = f"http://127.0.0.1:{port}/lab?token={token}"
        running = False
        while not running:
            try:
                line = lines.get(timeout=120)
            except queue.Empty:
                pytest.fail("JupyterLab did not start within 120 s:\n" + "".join(seen))
            seen.append(line)
            running = "is running at" in line
            if proc.poll() is not None and lines.empty():
                pytest.fail("run.sh exited early:\n" + "".join(seen))
        assert any(printed_url in line for line in seen), "".join(seen)
        assert (ROOT / "notebooks").is_dir()
        # jupyter_server logs "is running at" just before its event loop binds the port, and
        # nothing announces the bind: poll until it accepts, within a bound
        deadline = time.monotonic() + 60
        while not port_open(port):
            assert proc.poll() is None, "run.sh exited:\n" + "".join(seen)
            assert time.monotonic() < deadline, "port never opened:\n" + "".join(seen)
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}") as r:
            assert r.status == 200
        with urllib.request.urlopen(printed_url) as r:
            assert r.status == 200
            assert "JupyterLab" in r.read().decode("utf-8", "replace")
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents")
        assert denied.value.code == 403
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert not port_open(port)
