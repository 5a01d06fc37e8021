"""PNG plots of a run directory (``jobs.csv`` + ``summary.json``), with matplotlib's Agg backend.

:func:`plot_run` writes ``queue_length.png`` and ``utilization.png`` (over time, averaged over
``points`` equal time bins) and ``wait_times.png`` (distribution of waits, log bins).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from merkat.sim.metrics import read_jobs_csv


def _bin_means(
    times: npt.NDArray[np.float64], deltas: npt.NDArray[np.float64], edges: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Time average over each bin ``[edges[b], edges[b+1])`` of the step function that starts at
    0 and jumps by ``deltas[k]`` at ``times[k]``."""
    order = np.argsort(times, kind="stable")
    t = times[order]
    level = np.cumsum(deltas[order])  # value on [t[k], t[k+1])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # integral up to t[k]
    idx = np.searchsorted(t, edges, side="right") - 1
    safe = np.maximum(idx, 0)
    at_edges = np.where(idx >= 0, area[safe] + level[safe] * (edges - t[safe]), 0.0)
    out = np.diff(at_edges) / np.diff(edges)
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
        t1 = max(float(end.max()), t0 + 1.0)
        edges = np.linspace(t0, t1, points + 1)
        days = (edges[:-1] - t0) / 86400.0
        width_h = (t1 - t0) / points / 3600.0
        queue = _bin_means(
            np.concatenate([submit, start]),
            np.concatenate([np.ones_like(submit), -np.ones_like(start)]),
            edges,
        )
        busy = _bin_means(np.concatenate([start, end]), np.concatenate([procs, -procs]), edges)
        for name, values, ylabel in (
            ("queue_length.png", queue, "waiting jobs"),
            ("utilization.png", busy / cores, "busy cores / total cores"),
        ):
            fig, ax = plt.subplots(figsize=(9, 3.5))
            ax.plot(days, values, drawstyle="steps-post", linewidth=0.7)
            ax.set_xlabel(f"time since first submission (days); mean over bins of {width_h:.3g} h")
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
    ax.set_title(f"{label}\n{int((wait <= 0).sum())} of {wait.size} jobs did not wait", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "wait_times.png", dpi=100)
    plt.close(fig)
    paths.append(out / "wait_times.png")
    return paths
