"""``merkat bench sim``: the batch simulator's throughput on a trace as one pool of cores;
:func:`run` returns the JSON object (docs/benchmarks.md, "Simulator")."""

from __future__ import annotations

import os
import platform
import resource
import time
from pathlib import Path
from typing import Any


def run(path: Path, names: list[str], *, repeat: int, cores: int | None,
        general: bool) -> dict[str, Any]:
    """Read the SWF trace at ``path`` and time each batch scheduler of ``names`` (the best of
    ``repeat`` runs). ValueError (or :class:`~merkat.workload.swf.SwfError`) naming the
    trace or ``--cores`` when there is nothing to time."""
    from merkat.sim.metrics import summarize
    from merkat.workload.cluster import Cluster
    from merkat.workload.jobs import build_workload
    from merkat.workload.swf import read_swf
    from merkat.worlds.batch.baselines import schedule

    t0, c0 = time.perf_counter(), time.process_time()
    tr = read_swf(path)
    if len(tr) == 0:
        raise ValueError(f"{path}: no job records: nothing to time")
    read_s = time.perf_counter() - t0
    read_cpu_s = time.process_time() - c0
    pool = cores or tr.machine_size()
    if not pool:
        raise ValueError("--cores: the trace has no MaxProcs; give --cores")
    cluster = Cluster.pool(pool)
    t1 = time.perf_counter()
    wl = build_workload(tr, cluster)
    build_s = time.perf_counter() - t1
    results: dict[str, Any] = {}
    for s in names:
        best = best_cpu = float("inf")
        sched = None
        for _ in range(repeat):
            t, c = time.perf_counter(), time.process_time()
            sched = schedule(wl, cluster, s, use_fast=False if general else None)
            best = min(best, time.perf_counter() - t)
            best_cpu = min(best_cpu, time.process_time() - c)
        assert sched is not None
        m = summarize(wl, sched, cluster)
        results[s] = {
            "simulate_s": round(best, 4),
            "jobs_per_s": round(len(wl) / best),
            "simulate_cpu_s": round(best_cpu, 4),
            "jobs_per_cpu_s": round(len(wl) / max(best_cpu, 1e-9)),
            "avg_wait_s": round(m["avg_wait_s"], 3),
            "avg_bounded_slowdown": round(m["avg_bounded_slowdown"], 3),
        }
        results[s]["end_to_end_jobs_per_s"] = round(len(wl) / (read_s + build_s + best))
    return {
        "benchmark": "sim",
        "trace": path.name,
        "jobs": len(wl),
        "cores": pool,
        "read_s": round(read_s, 4),
        "read_cpu_s": round(read_cpu_s, 4),
        "build_workload_s": round(build_s, 4),
        "repeat": repeat,
        "engine": "general" if general else "fast single-pool loops",
        "schedulers": results,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
