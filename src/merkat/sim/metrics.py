"""Metrics of a simulated schedule, and the ``jobs.csv`` / ``summary.json`` files.

Definitions (per job j, over the simulated — not dropped — jobs):

- wait_j = start_j − submit_j;
- bounded slowdown_j = max(1, (wait_j + run_j) / max(run_j, τ)) with τ = 10 s;
- met_j = end_j <= deadline_j; value_j = budget_j if met_j else 0 (deadline-strict utility);
- makespan = max end − min submit; utilization = Σ procs·run / (total cores × makespan).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.engine import Schedule

TAU_S = 10.0
JOBS_CSV_HEADER = "job_id,submit,start,end,procs,deadline,met,value"


def met_mask(workload: Workload, schedule: Schedule) -> npt.NDArray[np.bool_]:
    return schedule.end <= workload.deadline


def summarize(workload: Workload, schedule: Schedule, cluster: Cluster) -> dict[str, Any]:
    """The schedule's metrics (module docstring), as JSON-ready floats and ints."""
    n = len(workload)
    dropped = workload.dropped_total
    if n == 0:
        return {
            "jobs": 0,
            "dropped": dropped,
            "avg_wait_s": 0.0,
            "avg_bounded_slowdown": 0.0,
            "utilization": 0.0,
            "makespan_s": 0.0,
            "met_deadlines": 0,
            "total_value": 0.0,
        }
    wait = schedule.start - workload.submit
    run = workload.run
    bsd = np.maximum((wait + run) / np.maximum(run, TAU_S), 1.0)
    makespan = float(schedule.end.max() - workload.submit.min())
    work = float((workload.procs * run).sum())
    util = work / (cluster.total_cores * makespan) if makespan > 0 else 0.0
    met = met_mask(workload, schedule)
    return {
        "jobs": n,
        "dropped": dropped,
        "avg_wait_s": float(wait.mean()),
        "avg_bounded_slowdown": float(bsd.mean()),
        "utilization": util,
        "makespan_s": makespan,
        "met_deadlines": int(met.sum()),
        "total_value": float(workload.budget[met].sum()),
    }


def _num(v: float) -> str:
    """A number for the CSV: integral values without decimals, others to 1e-6 s."""
    if not math.isfinite(v):
        return str(v)
    if v == math.floor(v):
        return str(int(v))
    text = f"{v:.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def write_jobs_csv(
    path: str | Path,
    workload: Workload,
    schedule: Schedule,
    met: npt.NDArray[np.bool_] | None = None,
    value: npt.NDArray[np.float64] | None = None,
    outcome: Sequence[str] | None = None,
    paid: npt.NDArray[np.float64] | None = None,
) -> None:
    """``jobs.csv``: one row per job in queue order; byte-identical for identical inputs.

    ``met`` and ``value`` default to the batch rule (ended by the deadline; value = budget);
    a market run passes its own (a job it never started has ``nan`` start and end), and its
    ``outcome`` (finished, late, stopped-deadline, stopped-budget, never-started) and ``paid``
    (credits) per job: two more columns.
    """
    if met is None:
        met = met_mask(workload, schedule)
    if value is None:
        value = np.where(met, workload.budget, 0.0)
    lines = [JOBS_CSV_HEADER]
    for jid, sub, st, en, p, dl, m, v in zip(
        workload.job_id.tolist(),
        workload.submit.tolist(),
        schedule.start.tolist(),
        schedule.end.tolist(),
        workload.procs.tolist(),
        workload.deadline.tolist(),
        met.tolist(),
        value.tolist(),
        strict=True,
    ):
        lines.append(f"{jid},{_num(sub)},{_num(st)},{_num(en)},{p},{_num(dl)},{int(m)},{_num(v)}")
    if outcome is not None and paid is not None:
        lines[0] += ",outcome,paid"
        for k, (o, x) in enumerate(zip(outcome, paid.tolist(), strict=True)):
            lines[k + 1] += f",{o},{_num(x)}"
    Path(path).write_text("\n".join(lines) + "\n")


def read_jobs_csv(path: str | Path) -> dict[str, npt.NDArray[np.float64]]:
    """The columns of a ``jobs.csv`` as float arrays (for plots and comparisons)."""
    with open(path) as f:
        header = f.readline().strip().split(",")
    cols = [k for k, name in enumerate(header) if name != "outcome"]  # the one text column
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, usecols=cols)
    names = [header[k] for k in cols]
    if data.size == 0:
        return {k: np.zeros(0) for k in names}
    return {k: data[:, i] for i, k in enumerate(names)}
