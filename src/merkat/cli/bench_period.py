"""``merkat bench period``: the scheduling-period loop on the themis-fig5 market run.

One market simulation (deadline-strict controllers, in-memory bank, simulated backend) of the
first ``--jobs`` HPC2N jobs on 240 hosts × 1 core, 5-minute periods, at one inter-arrival
factor: the run ``merkat sim experiment themis-fig5`` repeats for each factor. Prints one JSON
object: ``{jobs, periods, wall_s, ms_per_period, met_deadlines, migrations, cpu_s}``
(``wall_s`` is the simulation only, not reading the trace; ``cpu_s`` is the process's CPU time
over the same span, which other work on the machine disturbs less).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from merkat.cli import bench
from merkat.cli._common import LazyProgress, fail


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
    trace: Path | None = typer.Option(
        None, "--trace", help="SWF trace (default: HPC2N from $MERKAT_TRACES or ../shared/traces)."
    ),
) -> None:
    """Time one market run of the themis-fig5 sweep (JSON on stdout)."""
    from merkat.sim.cluster import Cluster
    from merkat.sim.market import simulate_market, summarize_market
    from merkat.sim.swf import SwfError, read_swf
    from merkat.sim.traces import HPC2N, find_trace
    from merkat.sim.workload import build_workload

    if not interarrival_factor > 0:
        fail("--interarrival-factor: must be > 0")
    if jobs < 0:
        fail(f"--jobs must be >= 0 (0: every job), got {jobs}")
    if hosts < 1:
        fail(f"--hosts must be >= 1, got {hosts}")
    try:
        path = trace if trace is not None else find_trace(HPC2N)
        tr = read_swf(path)
    except (FileNotFoundError, SwfError) as e:
        fail(f"--trace: {e}")
    cluster = Cluster(hosts, 1, None)
    w = build_workload(
        tr, cluster, jobs=jobs or None, interarrival_factor=interarrival_factor, seed=seed
    )
    bar = LazyProgress(len(w), "market", time.perf_counter())  # on stderr, after 1 s
    cpu = time.process_time()
    try:
        out = simulate_market(w, cluster, seed=seed, progress=bar)
    finally:
        bar.close()
    cpu = time.process_time() - cpu
    s = summarize_market(w, out, cluster)
    periods = len(out.records)
    doc = {
        "jobs": len(w),
        "periods": periods,
        "wall_s": round(out.wall_s, 3),
        "ms_per_period": round(1000 * out.wall_s / periods, 3) if periods else 0.0,
        "met_deadlines": s["met_deadlines"],
        "migrations": s["migrations"],
        "cpu_s": round(cpu, 3),
    }
    sys.stdout.write(json.dumps(doc) + "\n")
