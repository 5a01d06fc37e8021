"""``slo-fig2 --market drf``: the DRF-aware market against the two independent markets.

Beyond the papers (issue 29): on the memory-constrained setting of Fig. 2(a) (120 nodes x 2
cores, 2 GB each, deadline-strict), the same jobs run under

- ``two markets (CPU, memory)``: the proportional-share market, one price per resource, each
  VM bidding for CPU and memory apart (the default ``slo-fig2`` series "market
  (CPU+memory; 2 GB/node)");
- ``drf market (bundles)``: ``--market drf`` (:class:`merkat.market.mechanisms.DRFBundles`):
  one bid per VM for its bundle, one price per unit of dominant share;
- FCFS and EDF (discarding hopeless jobs, as ``slo-fig2``'s), for scale.

Both markets' rows carry the fairness reference, Dominant Resource Fairness by progressive
filling on the same demands every period (:mod:`merkat.worlds.merkat.fairness`): ``drf_gap`` (the
relative L1 distance of the applications' dominant shares to DRF's) and
``below_half_drf_pct`` (applications with under half their DRF share).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from merkat.experiments.common import (
    Run,
    efficiency_table,
    fmt,
    markdown,
    mean_rows,
    pyplot,
    series_plot,
)

TWO = "two markets (CPU, memory)"
DRF = "drf market (bundles)"
FCFS = "fcfs (2 GB/node)"
EDF = "edf (2 GB/node)"


def runs(market: str, seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    """The comparison's runs (``market`` is ``drf``, the only one it takes)."""
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "memory_per_host": 2048.0,
                            "jobs": jobs or 1000}
    out: list[Run] = []
    for f in factors:
        for k in range(seeds):
            out += [
                Run(TWO, "market", f, k, fairness=True, **base),
                Run(DRF, "market", f, k, market=market, fairness=True, **base),
                Run(FCFS, "fcfs", f, k, **base),
                Run(EDF, "edf", f, k, late="kill", **base),
            ]
    return out


def is_drf(rows: list[dict[str, Any]]) -> bool:
    """Whether ``rows`` are this comparison's (not the default slo-fig2 sweep)."""
    return any(r.get("label", r.get("scheduler")) == DRF for r in rows)


def derive(rows: list[dict[str, Any]], title: str, claim: str) -> dict[str, Any]:
    mean = mean_rows(rows)
    eff = efficiency_table(mean, DRF, {"vs_fcfs": FCFS, "vs_edf": EDF})
    by = {(r["interarrival_factor"], r["scheduler"]): r for r in mean}
    table = []
    for f in sorted({r["interarrival_factor"] for r in mean}):
        two, drf = by[(f, TWO)], by[(f, DRF)]
        table.append({
            "interarrival_factor": f,
            "value_two_markets": two["total_value"], "value_drf": drf["total_value"],
            "drf_vs_two_markets": drf["total_value"] / two["total_value"]
            if two["total_value"] > 0 else None,
            "met_pct_two_markets": two["met_deadlines_pct"],
            "met_pct_drf": drf["met_deadlines_pct"],
            "drf_gap_two_markets": two.get("drf_gap"), "drf_gap_drf": drf.get("drf_gap"),
            "below_half_pct_two_markets": two.get("below_half_drf_pct"),
            "below_half_pct_drf": drf.get("below_half_drf_pct"),
            "migrations_per_hour_two_markets": two.get("migrations_per_hour"),
            "migrations_per_hour_drf": drf.get("migrations_per_hour"),
        })
    text = markdown({"title": title, "paper_claim": claim, "rows": mean, "efficiency": eff})
    text += ("\n| factor | value: two markets | value: drf | drf / two | met %: two | met %: "
             "drf | distance to DRF: two | distance to DRF: drf | under half DRF (%): two | "
             "under half DRF (%): drf |\n|---|---|---|---|---|---|---|---|---|---|\n")
    for t in table:
        text += (f"| {t['interarrival_factor']:.1f} | {fmt(t['value_two_markets'])} | "
                 f"{fmt(t['value_drf'])} | {fmt(t['drf_vs_two_markets'])} | "
                 f"{fmt(t['met_pct_two_markets'])} | {fmt(t['met_pct_drf'])} | "
                 f"{fmt(t['drf_gap_two_markets'])} | {fmt(t['drf_gap_drf'])} | "
                 f"{fmt(t['below_half_pct_two_markets'])} | {fmt(t['below_half_pct_drf'])} |\n")
    return {"rows": mean, "efficiency": eff, "drf": table, "markdown": text}


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    series_plot(a, doc["rows"], [TWO, DRF, FCFS, EDF], "total_value")
    a.set(xlabel="inter-arrival factor", ylabel="total user satisfaction",
          title="deadline-strict, 2 GB/node")
    series_plot(b, doc["rows"], [TWO, DRF], "drf_gap")
    b.set(xlabel="inter-arrival factor", ylabel="distance to DRF (0 = DRF)",
          title="dominant shares vs progressive filling")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
