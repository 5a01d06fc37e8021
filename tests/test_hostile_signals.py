"""Signals (issue 18, item 9): SIGTERM to a ``--workers`` run stops its worker processes and
leaves no half-written output; the command ends with one line and exit 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (read from /proc)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parent[int(d)] = int(fields[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier} - out
        out |= frontier
    return out


def start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-m", "merkat", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_workers(p: subprocess.Popen[str], n: int, timeout: float = 60.0) -> set[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kids = children(p.pid)
        if len(kids) >= n:
            return kids
        assert p.poll() is None, p.communicate()
        time.sleep(0.2)
    pytest.fail(f"no {n} worker processes after {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize(("args", "workers"), [
    (["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--scheduler", "market", "--workers", "2",
      "--hosts", "240", "--cores-per-host", "1"], 1),  # piece 0 runs in the parent
    (["sim", "experiment", "themis-fig5", "--workers", "2", "--jobs", "400"], 2),
], ids=["sim-run", "experiment"])
def test_sigterm_stops_the_workers_and_leaves_no_output(
    args: list[str], workers: int, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    p = start([*args, "--out", str(out)])
    kids = wait_for_workers(p, workers)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert err.strip().splitlines()[-1] == "error: terminated"
    assert "Traceback" not in err
    end = time.monotonic() + 10
    while kids & children(os.getpid()) and time.monotonic() < end:
        time.sleep(0.2)
    alive = {k for k in kids if Path(f"/proc/{k}").exists()
             and Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}
    assert not alive, f"workers still running: {alive}"
    assert not out.exists()  # the run's temporary folder was removed, nothing half-written
    assert [q.name for q in tmp_path.iterdir()] == []


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open (its /proc fd links)."""
    try:
        return any(os.readlink(f) == str(path) for f in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or an fd closed while we read
        return False


def _as_from_a_shell() -> None:
    """In the child before exec: SIGINT at its default and not blocked, as a shell starts a
    command (a test worker may have inherited it ignored or blocked from its own parent)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_status(pid: int) -> str:
    """The signal masks of process ``pid`` (ignored, blocked, caught), from /proc."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "status unreadable"
    return ", ".join(ln.replace("\t", " ") for ln in lines
                     if ln.startswith(("SigIgn", "SigBlk", "SigCgt")))


def test_ctrl_c_is_seen_while_a_bank_command_waits_for_a_locked_database(
    tmp_path: Path,
) -> None:
    """SQLite's busy handler waited up to 60 s in C, deaf to Ctrl-C; it now waits in short
    slices and the retry loop (in Python) sees the signal at once. Nothing is written."""
    import sqlite3

    db = tmp_path / "bank.db"
    env = {**os.environ, "PYTHONPATH": SRC, "MERKAT_DB": f"sqlite:///{db}"}

    def merkat(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "merkat", *args], env=env, text=True,
                              capture_output=True, timeout=60)

    assert merkat("bank", "init").returncode == 0
    assert merkat("bank", "account", "create", "alice", "--kind", "user").returncode == 0
    assert merkat("bank", "account", "create", "bob", "--kind", "user").returncode == 0
    assert merkat("bank", "mint", "alice", "10", "--reason", "test").returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        # (started as from a shell: Ctrl-C at its default, whatever the test worker inherited)
        p = subprocess.Popen([sys.executable, "-m", "merkat", "bank", "transfer", "alice", "bob",
                              "1", "--reason", "test"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_as_from_a_shell)
        # waiting for the lock: it has opened the database (its imports done), then some more
        end = time.monotonic() + 30
        while not _has_open(p.pid, db) and p.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(1.0)
        assert p.poll() is None and _has_open(p.pid, db)
        t0 = time.monotonic()
        status = _signal_status(p.pid)
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail(f"no exit 10 s after SIGINT; the command's {status}; the test's "
                        f"{_signal_status(os.getpid())}")
        assert time.monotonic() - t0 < 3.0
        assert p.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out = merkat("bank", "balance", "alice", "-o", "json")
    assert json.loads(out.stdout)["balance"] == "10"
    assert merkat("bank", "audit").returncode == 0
