"""What the benchmarks measure with: CPU seconds, peak resident memory, the process's age."""

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
