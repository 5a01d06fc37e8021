"""``merkat bench sweep``: parses the flags, runs :func:`merkat.bench.sweep.run` (an
experiment's whole sweep, timed end to end) and prints its JSON object."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from merkat.bench.common import cpu_seconds
from merkat.cli import bench
from merkat.cli._common import fail


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
    from merkat.outputs import prepare_out_dir

    check_int("--workers", workers, 1, 1024)
    if jobs is not None:
        check_int("--jobs", jobs, 1, 10_000_000)
    check_float("--target", target, 0, 1e9, lo_open=True)
    if out is not None:
        prepare_out_dir(out)  # checked before the run, not after
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    from merkat.bench.sweep import run
    from merkat.experiments import EXPERIMENTS, FACTORS

    if name not in EXPERIMENTS:
        fail(f"unknown experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    fs = _factors(factors, FACTORS)
    try:
        doc = run(name, workers=workers, jobs=jobs, factors=fs, target=target, out=out,
                  t0=t0, cpu0=cpu0)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    except RuntimeError as exc:
        fail(str(exc), code=1)
    sys.stdout.write(json.dumps(doc) + "\n")
