"""``merkat bench period``: parses the flags, runs :func:`merkat.bench.period.run` (the
themis-fig5 market run, timed) with a progress bar on stderr and prints its JSON object."""

from __future__ import annotations

import json
import sys
import time

import typer

from merkat.cli import bench
from merkat.cli._common import LazyProgress, fail
from merkat.defaults import ADMISSION_S


@bench.app.command("period")
def bench_period(
    interarrival_factor: float = typer.Option(
        1.0, "--interarrival-factor", help="Inter-arrival times scaled by this factor (0.1-1.0)."
    ),
    jobs: int = typer.Option(
        1000, "--jobs", help="First N jobs of the trace; 0: every job (the full-trace target)."
    ),
    seed: int = typer.Option(0, "--seed", help="Workload and controller seed."),
    hosts: int = typer.Option(240, "--hosts", help="Hosts (1 core each)."),
    workers: int = typer.Option(
        1, "--workers", help="Cut the trace where the cluster is empty and run the pieces on "
        "this many processes (the same results; merkat.worlds.merkat.parallel).",
    ),
    trace: str = typer.Option(
        "HPC2N-2002-2.2-cln", "--trace", help="A trace name (`merkat traces list`) or an SWF file."
    ),
    admission: float = typer.Option(
        ADMISSION_S, "--admission", metavar="SECONDS", help="Admit new applications between "
        f"periods every SECONDS (Merkat §4.2.2: {ADMISSION_S:g}); 0 makes them wait for the next period (as before "
        "admission between periods existed)."),
    reference: bool = typer.Option(
        False, "--reference", help="Also run the FCFS reference (`merkat bench sim --schedulers "
        "fcfs --repeat 5`, ~2 s) after the run and print its jobs/s under \"reference\": a "
        "figure with the machine's speed of its own minutes."),
) -> None:
    """Time one market run of the themis-fig5 sweep (JSON on stdout)."""
    from merkat.bench.period import run
    from merkat.cli.validate import check_float, check_int
    from merkat.workload.swf import SwfError

    check_float("--interarrival-factor", interarrival_factor, 0, 1000, lo_open=True)
    check_int("--jobs", jobs, 0, 10_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    check_int("--hosts", hosts, 1, 1_000_000)
    check_int("--workers", workers, 1, 1024)
    check_float("--admission", admission, 0, 86400)
    bars: list[LazyProgress] = []

    def progress_for(total: int) -> LazyProgress:
        bars.append(LazyProgress(total, "market", time.perf_counter()))  # on stderr, after 1 s
        return bars[-1]

    try:
        doc = run(trace, jobs=jobs, interarrival_factor=interarrival_factor, seed=seed,
                  hosts=hosts, workers=workers, admission=admission, progress_for=progress_for)
    except (FileNotFoundError, SwfError) as e:
        fail(f"--trace: {e}")
    finally:
        for bar in bars:
            bar.close()
    if reference:
        from merkat.bench.common import fcfs_reference

        doc["reference"] = fcfs_reference()
    sys.stdout.write(json.dumps(doc) + "\n")
