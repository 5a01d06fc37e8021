"""``merkat-satisfaction-readings``: Merkat §5.4.3's satisfaction ratio under the readings of
what the paper leaves open (issue 29, disagreement 4; docs/experiments.md).

Each reading changes one thing of :mod:`.satisfaction`'s setup, the rest as there (30 Lublin
jobs of 1-8 processes on 4 × 8 cores, the market under ``deadline-strict``, EASY and the
Maui-like baseline with Tsafrir-like estimates, ±B satisfaction):

- ``paper`` — as ``merkat-satisfaction``: deadline factors x ~ U[1.2, 10], the baselines run
  jobs without VM overheads (the market's VMs boot in 30 s);
- ``boot-both`` — VM overheads on both sides: each batch job first boots its VMs, 30 s (its
  deadline unchanged);
- ``tight`` — the deadline distribution: x ~ U[1.2, 3] (B = 60/x as before);
- ``tight+boot`` — both.

Loads: three inter-arrival factors (1, 0.25, 0.05: offered load ≈ 0.26, 1.0, 5.2).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from merkat.control.utility import efficiency
from merkat.experiments.common import ScenarioRun, fmt, mean, pyplot
from merkat.experiments.registry import Experiment
from merkat.experiments.satisfaction import (
    SATISFACTION,
    satisfaction_row,
    satisfaction_workload,
)

READINGS: dict[str, dict[str, Any]] = {
    "paper": {"deadline_factor": (1.2, 10.0), "baseline_boot_s": 0.0},
    "boot-both": {"deadline_factor": (1.2, 10.0), "baseline_boot_s": 30.0},
    "tight": {"deadline_factor": (1.2, 3.0), "baseline_boot_s": 0.0},
    "tight+boot": {"deadline_factor": (1.2, 3.0), "baseline_boot_s": 30.0},
}
"""Each reading: the deadline factors' range and the batch jobs' VM boot (seconds)."""

FACTORS = (1.0, 0.25, 0.05)
SCHEDULERS = ("market", "easy", "maui")


def _runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[ScenarioRun]:
    return [ScenarioRun(f"{reading}/{s}", k, f, s) for reading in READINGS for f in FACTORS
            for k in range(seeds) for s in SCHEDULERS]


def reading_run(run: ScenarioRun) -> dict[str, Any]:
    """One reading, load, seed and scheduler (the reading is the label's first part)."""
    t0 = time.perf_counter()
    reading = READINGS[run.label.split("/")[0]]
    w = satisfaction_workload(run.seed, run.value, reading["deadline_factor"])
    row = satisfaction_row(w, run.scheduler, run.seed, reading["baseline_boot_s"])
    return {"label": run.label, "reading": run.label.split("/")[0], "scheduler": run.scheduler,
            "seed": run.seed, "interarrival_factor": run.value, **row,
            "_wall_s": time.perf_counter() - t0}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    table = []
    for reading in READINGS:
        for f in FACTORS:
            by = {s: sorted((r for r in rows if r["reading"] == reading and
                             r["interarrival_factor"] == f and r["scheduler"] == s),
                            key=lambda r: r["seed"]) for s in SCHEDULERS}
            m = [r["satisfaction"] for r in by["market"]]
            entry: dict[str, Any] = {
                "reading": reading, "interarrival_factor": f, "seeds": len(m),
                "offered_load": mean([r["offered_load"] for r in by["market"]]),
                **{f"{s}_met": mean([r["met_deadlines"] for r in by[s]]) for s in SCHEDULERS},
            }
            for base in ("easy", "maui"):
                b = [r["satisfaction"] for r in by[base]]
                entry[f"ratio_{base}"] = _finite(efficiency(sum(m), sum(b)))
                entry[f"ratio_{base}_per_seed"] = [_finite(efficiency(x, y))
                                                   for x, y in zip(m, b, strict=True)]
            table.append(entry)
    md = ["# Merkat §5.4.3's satisfaction ratio under the readings of the setup", "",
          "Paper: 2.79 × Maui. Ratio of the totals over the seeds [per seed].", "",
          "| reading | inter-arrival factor | offered load | met (market / EASY / Maui) | "
          "market / EASY | market / Maui |", "|---|---|---|---|---|---|"]

    def ratios(r: dict[str, Any], base: str) -> str:
        return (f"{fmt(r[f'ratio_{base}'])} "
                f"[{', '.join(fmt(x) for x in r[f'ratio_{base}_per_seed'])}]")

    for r in table:
        md.append(f"| {r['reading']} | {r['interarrival_factor']:g} | {fmt(r['offered_load'])} "
                  f"| {fmt(r['market_met'])} / {fmt(r['easy_met'])} / {fmt(r['maui_met'])} | "
                  f"{ratios(r, 'easy')} | {ratios(r, 'maui')} |")
    md.append("")
    return {"rows": table, "markdown": "\n".join(md)}


def _plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for k, reading in enumerate(READINGS):
        rows = [r for r in doc["rows"] if r["reading"] == reading]
        x = np.arange(len(rows)) + (k - 1.5) * 0.2
        y = [r["ratio_maui"] if r["ratio_maui"] is not None else np.nan for r in rows]
        ax.bar(x, y, 0.2, label=reading)
    ax.axhline(2.79, color="C3", ls="--", lw=1, label="paper: 2.79")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(FACTORS)), [f"factor {f:g}" for f in FACTORS])
    ax.set(ylabel="market / Maui satisfaction", title="merkat-satisfaction: readings")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


EXPERIMENT = Experiment(
    "merkat-satisfaction-readings",
    "Merkat §5.4.3's satisfaction ratio under the readings of the setup (issue 29)",
    "Merkat provides 2.79 times more value (±B satisfaction) than Maui (FCFS + backfilling).",
    _runs, _derive, _plot,
    {**SATISFACTION, "readings": {k: dict(v) for k, v in READINGS.items()},
     "interarrival_factors": list(FACTORS)},
    reading_run, sweeps_load=False)
"""Registered by :mod:`merkat.experiments.merkat` after ``merkat-satisfaction``."""
