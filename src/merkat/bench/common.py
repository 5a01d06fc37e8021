"""What the benchmarks measure with: CPU seconds, peak resident memory, the process's age, and
the FCFS reference run that scales a figure across machines (:func:`fcfs_reference`)."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished child processes (the benchmarks'
    ``cpu_s``: other work on the machine disturbs it less than wall time)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def peak_rss_mib() -> float:
    """The peak resident set, MiB, of this process or of its largest finished child (Linux
    ``ru_maxrss`` is in KiB), to 0.1 MiB."""
    kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return round(kib / 1024, 1)


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None elsewhere."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


REFERENCE_COMMAND = "merkat bench sim --schedulers fcfs --repeat 5"
"""The reference run the brief names (docs/benchmarks.md): the batch FCFS loop on the bundled
HPC2N trace as one pool, best of 5."""


def fcfs_reference() -> dict[str, object]:
    """:data:`REFERENCE_COMMAND` run in this process, now: ``{command, fcfs_jobs_per_s,
    fcfs_jobs_per_cpu_s}`` (what that command prints under ``schedulers.fcfs``), so that a
    figure carries the reference of its own minutes (``merkat bench period --reference``).
    A second or two; the machine's speed for this loop, which on a shared VM does not follow
    every swing of a larger working set (docs/benchmarks.md, "what the CPU targets need")."""
    from merkat.bench.sim import run
    from merkat.workload.traces import HPC2N, find_trace

    fcfs = run(find_trace(HPC2N), ["fcfs"], repeat=5, cores=None, general=False)["schedulers"][
        "fcfs"]
    return {"command": REFERENCE_COMMAND, "fcfs_jobs_per_s": fcfs["jobs_per_s"],
            "fcfs_jobs_per_cpu_s": fcfs["jobs_per_cpu_s"]}
