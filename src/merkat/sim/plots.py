"""PNG plots of a run directory (``jobs.csv`` + ``summary.json``), with matplotlib's Agg backend.

:func:`plot_run` writes ``queue_length.png`` and ``utilization.png`` (over time, sampled at
``points`` evenly spaced instants) and ``wait_times.png`` (distribution of waits, log bins).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from merkat.sim.metrics import read_jobs_csv


def _step_at(
    times: npt.NDArray[np.float64], deltas: npt.NDArray[np.float64], at: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Value at each instant of ``at`` of the step function that jumps by ``deltas[k]`` at
    ``times[k]`` (jumps at an instant count)."""
    order = np.argsort(times, kind="stable")
    level = np.cumsum(deltas[order])
    idx = np.searchsorted(times[order], at, side="right") - 1
    out = np.where(idx >= 0, level[np.maximum(idx, 0)], 0.0)
    return np.asarray(out, dtype=np.float64)


def plot_run(
    run_dir: str | Path, out_dir: str | Path | None = None, points: int = 2000
) -> list[Path]:
    """Write the PNGs of ``run_dir`` into ``out_dir`` (default: ``run_dir``); return their paths.

    Raises FileNotFoundError if ``jobs.csv`` or ``summary.json`` is missing.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run
    out.mkdir(parents=True, exist_ok=True)
    summary = json.loads((run / "summary.json").read_text())
    jobs = read_jobs_csv(run / "jobs.csv")
    cores = float(summary.get("cluster", {}).get("total_cores") or 1)
    label = f"{summary.get('scheduler', '?')} — {Path(str(summary.get('trace', run))).name}"
    submit, start, end, procs = jobs["submit"], jobs["start"], jobs["end"], jobs["procs"]
    paths: list[Path] = []
    if submit.size:
        t0 = float(submit.min())
        at = np.linspace(t0, float(end.max()), points)
        days = (at - t0) / 86400.0
        queue = _step_at(
            np.concatenate([submit, start]),
            np.concatenate([np.ones_like(submit), -np.ones_like(start)]),
            at,
        )
        busy = _step_at(np.concatenate([start, end]), np.concatenate([procs, -procs]), at)
        for name, values, ylabel in (
            ("queue_length.png", queue, "waiting jobs"),
            ("utilization.png", busy / cores, "busy cores / total cores"),
        ):
            fig, ax = plt.subplots(figsize=(9, 3.5))
            ax.plot(days, values, drawstyle="steps-post", linewidth=0.7)
            ax.set_xlabel("time since first submission (days)")
            ax.set_ylabel(ylabel)
            ax.set_title(label)
            fig.tight_layout()
            fig.savefig(out / name, dpi=100)
            plt.close(fig)
            paths.append(out / name)
    wait = start - submit
    fig, ax = plt.subplots(figsize=(6, 4))
    positive = wait[wait > 0]
    if positive.size:
        bins = np.logspace(0, np.log10(max(float(positive.max()), 10.0)), 50)
        ax.hist(positive, bins=bins.tolist())
        ax.set_xscale("log")
    ax.set_xlabel("wait time (s), jobs that waited")
    ax.set_ylabel("jobs")
    ax.set_title(f"{label}: {int((wait <= 0).sum())} of {wait.size} jobs did not wait")
    fig.tight_layout()
    fig.savefig(out / "wait_times.png", dpi=100)
    plt.close(fig)
    paths.append(out / "wait_times.png")
    return paths
