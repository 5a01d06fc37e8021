"""``merkat bench sweep``: an experiment's whole sweep, timed end to end (issue 11's target:
``themis-fig5`` on two workers in at most 60 s with the default install).

It runs what ``merkat sim experiment NAME --workers N`` runs (the same runs, the same files,
written to a temporary directory unless ``--out`` is given) and prints one JSON object:

``{experiment, workers, runs, wall_s, process_wall_s, cpu_s, run_wall_sum_s,
results_sha256, target_s, met}``

``wall_s`` is the experiment from its imports to its last file; ``process_wall_s`` the whole
command since the process started (what ``/usr/bin/time`` reports, interpreter start-up
included; ``wall_s`` where ``/proc`` is missing); ``cpu_s`` the CPU time of this process and
its worker processes; ``run_wall_sum_s`` the sum of the runs' own times (``timing.json``: the
best possible wall on N workers is this sum over N); ``results_sha256`` the digest of
``results.json``, which does not depend on the machine: two versions of the code that print
the same digest computed the same results. ``met``: ``process_wall_s <= target_s``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import typer

from merkat.cli import bench
from merkat.cli._common import cpu_seconds, fail


@bench.app.command("sweep")
def bench_sweep(
    name: str = typer.Argument("themis-fig5", help="The experiment (`merkat sim experiment`)."),
    workers: int = typer.Option(2, "--workers", help="Processes for the sweep."),
    jobs: int | None = typer.Option(
        None, "--jobs", help="Trace window (default: the experiment's; for quick checks)."),
    factors: str | None = typer.Option(
        None, "--factors", help="Inter-arrival factors, e.g. 0.1,1 (default: the sweep's)."),
    target: float = typer.Option(60.0, "--target", help="The target wall time (s)."),
    out: Path | None = typer.Option(
        None, "--out", help="Keep the experiment's files here, an absent or empty directory "
        "(default: a temporary directory)."),
) -> None:
    """Time an experiment's whole sweep end to end (JSON on stdout; target: themis-fig5 on
    2 workers <= 60 s)."""
    from merkat.cli.experiment import _factors
    from merkat.cli.validate import check_float, check_int
    from merkat.outputs import output_dir, prepare_out_dir

    check_int("--workers", workers, 1, 1024)
    if jobs is not None:
        check_int("--jobs", jobs, 1, 10_000_000)
    check_float("--target", target, 0, 1e9, lo_open=True)
    if out is not None:
        prepare_out_dir(out)  # checked before the run, not after
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    from merkat.sim.experiments import EXPERIMENTS, FACTORS, run_experiment

    if name not in EXPERIMENTS:
        fail(f"unknown experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    fs = _factors(factors, FACTORS)
    with ExitStack() as stack:
        # --out as `sim experiment --out`: refused when not empty, replaced only on success
        where = (stack.enter_context(output_dir(out)) if out is not None else
                 Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="merkat-sweep-"))))
        try:
            run_experiment(name, where, workers=workers, jobs=jobs, factors=fs)
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
        except RuntimeError as exc:
            fail(str(exc), code=1)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
        digest = hashlib.sha256((where / "results.json").read_bytes()).hexdigest()
        timing = json.loads((where / "timing.json").read_text())
    runs = timing.get("runs", [])
    process_wall = _process_age_s()
    total = process_wall if process_wall is not None else wall
    doc = {
        "experiment": name,
        "workers": workers,
        "runs": len(runs),
        "wall_s": round(wall, 3),
        "process_wall_s": round(total, 3),
        "cpu_s": round(cpu, 3),
        "run_wall_sum_s": round(sum(float(r.get("wall_s", 0.0)) for r in runs), 3),
        "results_sha256": digest,
        "target_s": target,
        "met": total <= target,
    }
    sys.stdout.write(json.dumps(doc) + "\n")


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None elsewhere."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
