"""``merkat bench period``: the scheduling-period loop on the themis-fig5 market run.

One market simulation (deadline-strict controllers, in-memory bank, simulated backend) of the
first ``--jobs`` HPC2N jobs on 240 hosts × 1 core, 5-minute periods, at one inter-arrival
factor: the run ``merkat sim experiment themis-fig5`` repeats for each factor. Prints one JSON
object: ``{jobs, periods, wall_s, ms_per_period, met_deadlines, migrations, cpu_s, workers,
admission_s, pieces, peak_rss_mib}``
(``wall_s`` is the simulation only, not reading the trace; ``cpu_s`` is the CPU time of the
process and of its ``--workers`` processes over the same span, which other work on the machine
disturbs less; ``pieces``: how ``--workers`` cut the run, docs/simulator-market.md;
``peak_rss_mib``: the peak resident memory, MiB, of the process (reading the trace included) or,
with ``--workers``, of the largest of it and its worker processes: ``getrusage`` ``ru_maxrss``).
"""

from __future__ import annotations

import json
import resource
import sys
import time

import typer

from merkat.cli import bench
from merkat.cli._common import LazyProgress, cpu_seconds, fail


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
        "this many processes (the same results; merkat.sim.parallel).",
    ),
    trace: str = typer.Option(
        "HPC2N-2002-2.2-cln", "--trace", help="A trace name (`merkat traces list`) or an SWF file."
    ),
    admission: float = typer.Option(
        10.0, "--admission", metavar="SECONDS", help="Admit new applications between periods "
        "every SECONDS (Merkat §4.2.2: 10); 0 makes them wait for the next period (as before "
        "admission between periods existed)."),
) -> None:
    """Time one market run of the themis-fig5 sweep (JSON on stdout)."""
    from merkat.cli.validate import check_float, check_int
    from merkat.sim.cluster import Cluster
    from merkat.sim.market.trace import summarize_market
    from merkat.sim.options import MarketConfig
    from merkat.sim.parallel import simulate_parallel
    from merkat.sim.workload.jobs import build_workload
    from merkat.sim.workload.swf import SwfError, read_swf
    from merkat.sim.workload.traces import find_trace

    check_float("--interarrival-factor", interarrival_factor, 0, 1000, lo_open=True)
    check_int("--jobs", jobs, 0, 10_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    check_int("--hosts", hosts, 1, 1_000_000)
    check_int("--workers", workers, 1, 1024)
    check_float("--admission", admission, 0, 86400)
    try:
        path = find_trace(trace)
        tr = read_swf(path)
    except (FileNotFoundError, SwfError) as e:
        fail(f"--trace: {e}")
    cluster = Cluster(hosts, 1, None)
    w = build_workload(
        tr, cluster, jobs=jobs or None, interarrival_factor=interarrival_factor, seed=seed
    )
    bar = LazyProgress(len(w), "market", time.perf_counter())  # on stderr, after 1 s
    cpu = cpu_seconds()
    try:
        out = simulate_parallel(w, cluster, MarketConfig(admission=admission or None),
                                seed=seed, progress=bar, workers=workers)
    finally:
        bar.close()
    cpu = cpu_seconds() - cpu
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
        "workers": workers,
        "admission_s": admission or None,
        "pieces": list(out.pieces),
        "peak_rss_mib": peak_rss_mib(),
    }
    sys.stdout.write(json.dumps(doc) + "\n")


def peak_rss_mib() -> float:
    """The peak resident set, MiB, of this process or of its largest finished child (Linux
    ``ru_maxrss`` is in KiB), to 0.1 MiB."""
    kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return round(kib / 1024, 1)
