"""``slo-ablation``: the SLO paper's Fig. 2-3 claims under each reading (issue 29,
disagreement 2; :mod:`merkat.experiments.readings`).

One row per (reading, inter-arrival factor), the paper's metrics over the seeds:

- ``vs_edf``: market / EDF total satisfaction, deadline-strict, CPU + memory on 2 GB nodes
  (Fig. 2(a): the market loses to EDF increasingly with load, and wins at light load);
- ``mix_vs_strict``: the market's satisfaction with the four policies at random over its
  satisfaction with all deadline-strict (Fig. 2(b): below 1);
- ``suspend_resume_per_hour``: the CPU + memory market's suspend and resume operations per
  hour (Fig. 3(b): fewer at high load).

Runs that a reading does not change are shared: ``edf`` and ``value`` readings reuse the market
runs, ``overheads`` and ``suspend`` the EDF runs, and ``value`` is a second sum over the same
jobs (``value_tasks``). Default window: the first 200 HPC2N jobs at factors 0.1 (high load)
and 1.0 (light load) (``--jobs``, ``--factors``); give ``--seeds 3`` or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from merkat.experiments.common import COMMON, Run, execute, fmt, pyplot
from merkat.experiments.readings import READINGS, apply_readings
from merkat.experiments.registry import EXPERIMENTS, Experiment

ROWS: tuple[tuple[str, dict[str, str]], ...] = (
    ("as built", {}),  # edf=run: slo-fig2 before the ablation
    ("edf=kill", {"edf": "kill"}),
    ("value=tasks", {"value": "tasks"}),
    ("overheads=none", {"overheads": "none"}),
    ("suspend=damped", {"suspend": "damped"}),
    ("edf=kill, suspend=damped", {"edf": "kill", "suspend": "damped"}),
    ("all four", {"edf": "kill", "value": "tasks", "overheads": "none", "suspend": "damped"}),
)
"""The ablation's readings, one table row each (absent keys: the default)."""

SERIES = ("market", "market, random policies", "edf", "edf, random policies")
JOBS = 200
FACTORS = (0.1, 1.0)


def _full(readings: dict[str, str]) -> dict[str, str]:
    return {k: readings.get(k, values[0]) for k, values in READINGS.items()}


def _label(series: str, readings: dict[str, str]) -> str:
    """The shared run's label: only the readings that change it."""
    r = _full(readings)
    if series.startswith("market"):
        return f"{series}|overheads={r['overheads']}|suspend={r['suspend']}"
    return f"{series}|edf={r['edf']}"


def _runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "memory_per_host": 2048.0,
                            "jobs": jobs or JOBS}
    runs: dict[tuple[str, float, int], Run] = {}
    for _, readings in ROWS:
        for f in factors:
            for k in range(seeds):
                for series in SERIES:
                    label = _label(series, readings)
                    if (label, f, k) in runs:
                        continue
                    sched = "market" if series.startswith("market") else "edf"
                    run = Run(label, sched, f, k, random_policies="random" in series, **base)
                    plain = {key: v for key, v in readings.items() if key != "value"}
                    runs[(label, f, k)] = apply_readings(run, plain, sched == "market")
    return list(runs.values())


def _execute(run: Run) -> dict[str, Any]:
    row = execute(run)
    row["value_tasks"] = row.pop("_value_tasks")
    return row


def _stats(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)), "min": float(np.min(values)),
            "max": float(np.max(values)), "per_seed": values}


def _derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["label"], r["interarrival_factor"], r["seed"]): r for r in rows}
    factors = sorted({r["interarrival_factor"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    table: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    for name, readings in ROWS:
        key = "value_tasks" if readings.get("value") == "tasks" else "total_value"
        per_factor: dict[float, dict[str, Any]] = {}
        for f in factors:
            def val(series: str, k: int, f: float = f, key: str = key,
                    readings: dict[str, str] = readings) -> float:
                return float(by[(_label(series, readings), f, k)][key])

            vs_edf = [val("market", k) / val("edf", k) if val("edf", k) > 0 else float("nan")
                      for k in seeds]
            mix = [val("market, random policies", k) / val("market", k)
                   if val("market", k) > 0 else float("nan") for k in seeds]
            ops = [float(by[(_label("market", readings), f, k)]["suspend_resume_per_hour"])
                   for k in seeds]
            row = {"reading": name, "interarrival_factor": f, "vs_edf": _stats(vs_edf),
                   "mix_vs_strict": _stats(mix), "suspend_resume_per_hour": _stats(ops)}
            per_factor[f] = row
            table.append(row)
        hi, lo = per_factor[factors[0]], per_factor[factors[-1]]
        verdicts.append({
            "reading": name,
            # Fig. 2(a): the loss to EDF grows with load, and the market is ahead at light load
            "edf_loss_grows": hi["vs_edf"]["mean"] < lo["vs_edf"]["mean"],
            "ahead_at_light_load": lo["vs_edf"]["mean"] >= 1.0,
            # Fig. 2(b): the random mix below all deadline-strict at every load
            "mix_degrades": all(r["mix_vs_strict"]["mean"] < 1.0 for r in per_factor.values()),
            # Fig. 3(b): fewer suspend/resume operations per hour at high load than at light
            "ops_fall_with_load": hi["suspend_resume_per_hour"]["mean"]
            < lo["suspend_resume_per_hour"]["mean"],
        })
    text = "# slo-ablation: SLO paper Fig. 2-3 under each reading\n\n" + _markdown(table, verdicts)
    return {"ablation": table, "verdicts": verdicts, "markdown": text}


def _cell(s: dict[str, Any], digits: int = 2) -> str:
    seeds = ", ".join(f"{v:.{digits}f}" for v in s["per_seed"])
    return f"{s['mean']:.{digits}f} [{seeds}]"


def _markdown(table: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> str:
    lines = [
        "| reading | factor | market / EDF (mean [seeds]) | random mix / strict | "
        "suspend+resume/h (mean [min-max]) |",
        "|---|---|---|---|---|",
    ]
    for r in table:
        o = r["suspend_resume_per_hour"]
        lines.append(f"| {r['reading']} | {r['interarrival_factor']:.1f} | {_cell(r['vs_edf'])} | "
                     f"{_cell(r['mix_vs_strict'])} | {fmt(o['mean'])} "
                     f"[{fmt(o['min'])}-{fmt(o['max'])}] |")
    lines += ["", "| reading | Fig. 2(a) loss to EDF grows with load | Fig. 2(a) ahead of EDF "
              "at light load | Fig. 2(b) mix degrades | Fig. 3(b) fewer operations at high "
              "load |", "|---|---|---|---|---|"]
    yes = {True: "reproduced", False: "no"}
    for v in verdicts:
        lines.append(f"| {v['reading']} | {yes[v['edf_loss_grows']]} | "
                     f"{yes[v['ahead_at_light_load']]} | {yes[v['mix_degrades']]} | "
                     f"{yes[v['ops_fall_with_load']]} |")
    return "\n".join(lines) + "\n"


def _plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    styles = ("o-", "s--", "^:", "d-.", "v-", "x--", "+:")
    for (name, _), style in zip(ROWS, styles, strict=False):
        rows = [r for r in doc["ablation"] if r["reading"] == name]
        xs = [r["interarrival_factor"] for r in rows]
        for ax, key in zip(axes, ("vs_edf", "mix_vs_strict", "suspend_resume_per_hour"),
                           strict=True):
            mean = [r[key]["mean"] for r in rows]
            err = [[m - r[key]["min"] for m, r in zip(mean, rows, strict=True)],
                   [r[key]["max"] - m for m, r in zip(mean, rows, strict=True)]]
            ax.errorbar(xs, mean, yerr=err, fmt=style, label=name, capsize=2)
    for ax, title in zip(axes, ("(a) market / EDF, deadline-strict", "(b) random mix / strict",
                                "(c) suspend+resume per hour"), strict=True):
        ax.set(xlabel="inter-arrival factor", title=title)
    axes[0].axhline(1.0, color="grey", lw=0.5)
    axes[1].axhline(1.0, color="grey", lw=0.5)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


EXPERIMENTS.register(Experiment(
    "slo-ablation",
    "SLO paper Fig. 2-3 under each reading (issue 29, disagreement 2)",
    "(a) the market loses to EDF increasingly with load and wins at light load; (b) the "
    "random policy mix degrades satisfaction; (c) suspend/resume operations fall at high load.",
    _runs,
    _derive,
    _plot,
    {**COMMON, "jobs": JOBS, "cluster": "120 nodes x 2 cores, 2 GB each",
     "readings": {name: r for name, r in ROWS}},
    execute=_execute,
    default_factors=FACTORS,
))
