"""``merkat bench startup``: how fast the ``merkat`` command answers, as whole processes.

Each measured command is started ``runs`` times (after ``warmup`` runs not counted) as a
new ``python -m merkat ...`` process, timed from start to exit; :func:`run`'s JSON gives each one's
median, min and max wall seconds against its target (``--help`` ≤ 0.3 s; ``bank balance`` and
``bank transfer`` on a scratch SQLite bank ≤ 0.6 s), and the median CPU seconds (user + system)
of the process, which another process's load inflates less than its wall time. Quote the
median: one slow run on a busy machine must not move it.

The command is measured as installed: merkat's modules are byte-compiled first, as ``pip
install`` does (``compileall``), because with ``PYTHONDONTWRITEBYTECODE`` set (some shells and
IDEs set it) an editable checkout would otherwise recompile every module on every run
(≈ +0.3 s). ``bytecode`` in the JSON says how many modules had to be compiled.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGETS_S = {"help": 0.3, "bank_balance": 0.6, "bank_transfer": 0.6}


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``cmd``; RuntimeError when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[2:])}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def compile_package() -> int:
    """Byte-compile merkat's modules where their bytecode is missing or stale (as ``pip
    install`` does); return how many were compiled."""
    import compileall
    import importlib.util

    import merkat

    root = Path(merkat.__file__).parent
    stale = sum(
        1 for py in root.rglob("*.py")
        if not Path(importlib.util.cache_from_source(str(py))).exists()
        or Path(importlib.util.cache_from_source(str(py))).stat().st_mtime < py.stat().st_mtime
    )
    if stale:
        compileall.compile_dir(str(root), quiet=1)
    return stale


def run(runs: int, warmup: int) -> dict[str, Any]:
    """Time ``merkat --help``, ``bank balance`` and ``bank transfer`` (a scratch SQLite bank)
    ``runs`` times each after ``warmup`` untimed runs; RuntimeError when a command fails."""
    from merkat.bank.db import open_ledger
    from merkat.bank.ledger import AccountKind
    from merkat.bank.money import parse_amount

    base = [sys.executable, "-m", "merkat"]
    env = dict(os.environ)
    env.pop("MERKAT_DEBUG", None)
    with tempfile.TemporaryDirectory(prefix="merkat-bench-startup-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'bank.db'}"
        ledger = open_ledger(db, create=True)
        try:
            ledger.create_account("alice", AccountKind.user, None)
            ledger.create_account("bob", AccountKind.user, None)
            ledger.mint("alice", parse_amount("1000000"), "bench startup", None, None)
        finally:
            ledger.close()
        commands = {
            "help": [*base, "--help"],
            "bank_balance": [*base, "bank", "balance", "alice", "--db", db],
            "bank_transfer": [*base, "bank", "transfer", "alice", "bob", "0.5", "--db", db],
        }
        compiled = compile_package()
        results = {}
        for name, cmd in commands.items():
            for _ in range(warmup):
                _time(cmd, env)
            timed = [_time(cmd, env) for _ in range(runs)]
            walls = [w for w, _ in timed]
            median = statistics.median(walls)
            results[name] = {
                "command": "merkat " + " ".join(cmd[3:]).replace(db, "sqlite:///TMP/bank.db"),
                "median_s": round(median, 3),
                "min_s": round(min(walls), 3),
                "max_s": round(max(walls), 3),
                "cpu_median_s": round(statistics.median(c for _, c in timed), 3),
                "target_s": TARGETS_S[name],
                "met": median <= TARGETS_S[name],
            }
    return {
        "benchmark": "startup",
        "runs": runs,
        "warmup": warmup,
        "commands": results,
        "bytecode": {"compiled_first": compiled},
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
