"""``merkat bench period``: the scheduling-period loop on the themis-fig5 market run.

One market simulation (deadline-strict controllers, in-memory bank, simulated backend) of the
first ``jobs`` jobs of a trace on ``hosts`` hosts × 1 core, 5-minute periods, at one
inter-arrival factor: the run ``merkat sim experiment themis-fig5`` repeats for each factor.
:func:`run` returns ``{jobs, periods, wall_s, ms_per_period, met_deadlines, migrations, cpu_s,
workers, admission_s, pieces, peak_rss_mib}`` (``wall_s`` is the simulation only, not reading
the trace; ``cpu_s`` is the CPU time of the process and of its ``workers`` processes over the
same span, which other work on the machine disturbs less; ``pieces``: how ``workers`` cut the
run, docs/simulator-market.md; ``peak_rss_mib``: the peak resident memory, MiB, of the process
(reading the trace included) or, with ``workers``, of the largest of it and its worker
processes: ``getrusage`` ``ru_maxrss``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from merkat.bench.common import cpu_seconds, peak_rss_mib


def run(trace: str, *, jobs: int, interarrival_factor: float, seed: int, hosts: int,
        workers: int, admission: float,
        progress_for: Callable[[int], Callable[[int], Any]] | None = None) -> dict[str, Any]:
    """Run and time the market on ``trace`` (a name or an SWF file; FileNotFoundError or
    :class:`~merkat.workload.swf.SwfError` when it cannot be read). ``progress_for`` is
    given the number of jobs once the workload is built and returns the callback told of each
    job done (the CLI's bar); ``admission`` 0 makes arrivals wait for the next period."""
    from merkat.workload.cluster import Cluster
    from merkat.workload.jobs import build_workload
    from merkat.workload.swf import read_swf
    from merkat.workload.traces import find_trace
    from merkat.worlds.merkat.options import MarketConfig
    from merkat.worlds.merkat.parallel import simulate_parallel
    from merkat.worlds.merkat.trace import summarize_market

    tr = read_swf(find_trace(trace))
    cluster = Cluster(hosts, 1, None)
    w = build_workload(
        tr, cluster, jobs=jobs or None, interarrival_factor=interarrival_factor, seed=seed
    )
    progress = progress_for(len(w)) if progress_for is not None else None
    cpu = cpu_seconds()
    out = simulate_parallel(w, cluster, MarketConfig(admission=admission or None),
                            seed=seed, progress=progress, workers=workers)
    cpu = cpu_seconds() - cpu
    s = summarize_market(w, out, cluster)
    periods = len(out.records)
    return {
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
