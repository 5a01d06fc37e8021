"""The SLO paper's experiments: ``slo-fig2`` and ``slo-fig3``.

- ``slo-fig2`` — SLO paper Fig. 2: 120 nodes × 2 cores; (a) deadline-strict with memory
  plentiful (CPU market) vs constrained at 2 GB per node (CPU + memory market), against FCFS
  and EDF; (b) each application draws one of the four SLO policies;
- ``slo-fig3`` — SLO paper Fig. 3: migrations and suspend/resume operations per hour and
  applications suspended, CPU-only vs CPU + memory.

``slo-fig2 --market drf`` compares the DRF-aware market with the two independent markets
(:mod:`.slo_drf`); both take ``--reading KEY=VALUE`` (:mod:`.readings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from merkat.experiments import slo_drf
from merkat.experiments.common import (
    COMMON,
    Run,
    efficiency_table,
    mean_rows,
    pyplot,
    series_plot,
)
from merkat.experiments.readings import DEFAULTS
from merkat.experiments.registry import EXPERIMENTS, Experiment

# --- slo-fig2 / slo-fig3 -------------------------------------------------------------------

EDF_LATE = DEFAULTS["edf"]
"""slo-fig2's EDF discards jobs that can no longer meet their deadline (issue 29, the
ablation: docs/experiments.md; ``--reading edf=run`` runs them late as first built)."""

SLO_CLUSTER = {"hosts": 120, "cores_per_host": 2, "memory_per_host": 2048.0}


def _slo2_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "jobs": jobs or 1000}
    runs: list[Run] = []
    for f in factors:
        for k in range(seeds):
            runs += [
                Run("market (CPU; memory plentiful)", "market", f, k, **base),
                Run(
                    "market (CPU+memory; 2 GB/node)", "market", f, k, memory_per_host=2048.0, **base
                ),
                Run("fcfs (2 GB/node)", "fcfs", f, k, memory_per_host=2048.0, **base),
                Run("edf (2 GB/node)", "edf", f, k, memory_per_host=2048.0, late=EDF_LATE,
                    **base),
                Run(
                    "market, random policies",
                    "market",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    **base,
                ),
                Run(
                    "fcfs, random policies",
                    "fcfs",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    **base,
                ),
                Run(
                    "edf, random policies",
                    "edf",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    late=EDF_LATE,
                    **base,
                ),
            ]
    return runs


SLO2_TITLE = "SLO paper Fig. 2: total user satisfaction"
SLO2_CLAIM = ("(a) With CPU and memory allocated the market outperforms FCFS much more than "
              "with CPU only, and loses to EDF increasingly with load; (b) with the four "
              "policies drawn at random the satisfaction degrades.")


def _slo2_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if slo_drf.is_drf(rows):  # --market drf
        return slo_drf.derive(rows, SLO2_TITLE, SLO2_CLAIM)
    mean = mean_rows(rows)
    return {
        "rows": mean,
        "efficiency": efficiency_table(
            mean,
            "market (CPU+memory; 2 GB/node)",
            {"vs_fcfs": "fcfs (2 GB/node)", "vs_edf": "edf (2 GB/node)"},
        ),
    }


def _slo2_plot(doc: dict[str, Any], path: Path) -> None:
    if "drf" in doc:
        slo_drf.plot(doc, path)
        return
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    series_plot(
        a,
        doc["rows"],
        [
            "market (CPU; memory plentiful)",
            "market (CPU+memory; 2 GB/node)",
            "fcfs (2 GB/node)",
            "edf (2 GB/node)",
        ],
        "total_value",
    )
    a.set(
        xlabel="inter-arrival factor", ylabel="total user satisfaction", title="(a) deadline-strict"
    )
    series_plot(
        b,
        doc["rows"],
        ["market, random policies", "fcfs, random policies", "edf, random policies"],
        "total_value",
    )
    b.set(
        xlabel="inter-arrival factor",
        ylabel="total user satisfaction",
        title="(b) the four policies at random",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _slo3_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "jobs": jobs or 1000}
    return [
        r
        for f in factors
        for k in range(seeds)
        for r in (
            Run("CPU", "market", f, k, **base),
            Run("CPU+memory", "market", f, k, memory_per_host=2048.0, **base),
        )
    ]


def _slo3_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rows": mean_rows(rows)}


def _slo3_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, title in zip(
        axes,
        ("migrations_per_hour", "suspend_resume_per_hour", "apps_suspended"),
        ("(a) migrations per hour", "(b) suspend/resume per hour", "(c) applications suspended"),
        strict=True,
    ):
        series_plot(ax, doc["rows"], ["CPU", "CPU+memory"], key)
        ax.set(xlabel="inter-arrival factor", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


EXPERIMENTS.register(Experiment(
        "slo-fig2",
        SLO2_TITLE,
        SLO2_CLAIM,
        _slo2_runs,
        _slo2_derive,
        _slo2_plot,
        {
            **COMMON,
            "cluster": "120 nodes x 2 cores, 2 GB each (or memory plentiful)",
            "memory": "from the trace, else U[10 %, 90 %] of 2 GB",
            "edf": "kill: a job that can no longer meet its deadline is discarded "
                   "(--reading edf=run: run late)",
        },
        takes_readings=True,
        markets=("drf",),
        runs_for_market=slo_drf.runs,
))
EXPERIMENTS.register(Experiment(
        "slo-fig3",
        "SLO paper Fig. 3: VM operations",
        "VM operations decrease when the system is highly loaded, and are significantly "
        "higher with CPU and memory than with CPU only.",
        _slo3_runs,
        _slo3_derive,
        _slo3_plot,
        {**COMMON, "cluster": "120 nodes x 2 cores, 2 GB each", "policy": "deadline-strict"},
        takes_readings=True,
))
