"""The themis-fig5 ablation table and figure of docs/experiments.md (issue 29, disagreement 1)
from the results of several ``merkat sim experiment themis-fig5 --seeds K`` runs.

    python scripts/fig5_readings.py OUT.png LABEL=DIR [LABEL=DIR ...]   (split at the last =)

Prints one markdown row per (factor, reading): market / EDF value as the mean over the seeds
[per seed], market / FCFS (mean), deadlines met by the market (%), migrations and
suspend+resume per hour; draws market / EDF per reading and factor (bars: the mean, ticks: each
seed) in OUT.png.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def rows(label: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    runs = doc["runs"]
    out = []
    for f in sorted({r["interarrival_factor"] for r in runs}):
        by = {(r["scheduler"], r["seed"]): r for r in runs if r["interarrival_factor"] == f}
        seeds = sorted({s for _, s in by})
        m = [by["market", s] for s in seeds]
        out.append({
            "factor": f, "reading": label,
            "edf": [r["total_value"] / by["edf", r["seed"]]["total_value"] for r in m],
            "fcfs": statistics.mean(r["total_value"] / by["fcfs", r["seed"]]["total_value"]
                                    for r in m),
            "met": statistics.mean(r["met_deadlines_pct"] for r in m),
            "mig": statistics.mean(r["migrations_per_hour"] for r in m),
            "sr": statistics.mean(r["suspend_resume_per_hour"] for r in m),
        })
    return out


def main(argv: list[str]) -> None:
    png, pairs = Path(argv[0]), [a.rsplit("=", 1) for a in argv[1:]]
    table = [r for label, d in pairs
             for r in rows(label, json.loads((Path(d) / "results.json").read_text()))]
    table.sort(key=lambda r: r["factor"])
    print("| factor | reading | market / EDF value (mean [seeds]) | market / FCFS | met % market "
          "| migrations/h | suspend+resume/h |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        seeds = ", ".join(f"{x:.2f}" for x in r["edf"])
        print(f"| {r['factor']:g} | {r['reading']} | {statistics.mean(r['edf']):.2f} [{seeds}] | "
              f"{r['fcfs']:.2f} | {r['met']:.1f} | {r['mig']:.0f} | {r['sr']:.0f} |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    factors = sorted({r["factor"] for r in table})
    labels = list(dict.fromkeys(label for label, _ in pairs))  # a label may name several dirs
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(labels)
    labelled: set[str] = set()
    for k, label in enumerate(labels):
        for j, f in enumerate(factors):
            found = [r for r in table if r["reading"] == label and r["factor"] == f]
            if not found:
                continue
            x = j + (k - (len(labels) - 1) / 2) * width
            ax.bar(x, statistics.mean(found[0]["edf"]), width, color=f"C{k}",
                   label=None if label in labelled else label)
            labelled.add(label)
            ax.plot([x] * len(found[0]["edf"]), found[0]["edf"], "k_", ms=8)
    ax.axhline(0.75, color="C3", ls="--", lw=1, label="paper: at most 25 % loss")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(factors)), [f"factor {f:g}" for f in factors])
    ax.set(ylabel="market / EDF value", title="themis-fig5 (vertical-deadline): readings")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1:])
