"""``merkat bench startup``: how fast the ``merkat`` command answers, as whole processes.

Each measured command is started ``--runs`` times (after ``--warmup`` runs not counted) as a
new ``python -m merkat ...`` process, timed from start to exit; the JSON gives each one's
median, min and max wall seconds against its target (``--help`` ≤ 0.3 s; ``bank balance`` and
``bank transfer`` on a scratch SQLite bank ≤ 0.6 s). Quote the median: one slow run on a busy
machine must not move it.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

from merkat.cli import bench
from merkat.cli._common import fail, print_json

TARGETS_S = {"help": 0.3, "bank_balance": 0.6, "bank_transfer": 0.6}


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        fail(f"{' '.join(cmd[2:])}: exit {r.returncode}: {r.stderr.decode(errors='replace')}", 1)
    return wall


@bench.app.command("startup")
def bench_startup(
    runs: int = typer.Option(5, "--runs", min=1, max=100, help="Timed runs of each command."),
    warmup: int = typer.Option(1, "--warmup", min=0, max=10, help="Untimed runs first."),
) -> None:
    """Start-up time of `merkat --help`, `bank balance`, `bank transfer` (SQLite); JSON."""
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
        results = {}
        for name, cmd in commands.items():
            for _ in range(warmup):
                _time(cmd, env)
            walls = [_time(cmd, env) for _ in range(runs)]
            median = statistics.median(walls)
            results[name] = {
                "command": "merkat " + " ".join(cmd[3:]).replace(db, "sqlite:///TMP/bank.db"),
                "median_s": round(median, 3),
                "min_s": round(min(walls), 3),
                "max_s": round(max(walls), 3),
                "target_s": TARGETS_S[name],
                "met": median <= TARGETS_S[name],
            }
    print_json(
        {
            "benchmark": "startup",
            "runs": runs,
            "warmup": warmup,
            "commands": results,
            "python": platform.python_version(),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
            "load_average_1m": round(os.getloadavg()[0], 2),
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        }
    )
