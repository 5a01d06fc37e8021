"""``tycoon-ar6`` (Tycoon §5.4, Fig. 4): a 40-hour price history of a busy Tycoon market (jobs
arriving with normally distributed budgets), first 20 h to fit AR(6), last 20 h to check
one-hour forecasts, with and without smoothing, against "the price stays" (paper: ε 8.96 % vs
9.44 %). The readings the paper leaves open are ablated in :mod:`.tycoon_ablation`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from merkat import seeds
from merkat.experiments.common import pyplot, save_figure
from merkat.experiments.registry import EXPERIMENTS, Experiment
from merkat.experiments.tycoon import FUNDING, HOUR, SeedRun, funding_config, seed_runs
from merkat.predict import ar
from merkat.worlds.tycoon.simulator import TycoonJob, simulate

AR6: dict[str, Any] = {
    "history_h": 40,
    "fit_h": 20,
    "order": 6,
    "forecast_h": 1,
    "load": "tycoon-funding's: 30 dual-CPU hosts, five users launched 60 s apart, each a job of "
    "15 sub-jobs of 212 CPU-minutes; when all five jobs have ended the next round starts",
    "budget": "normal, mean 300, sd 100, at least 20",
    "deadline_h": 5.5,
    "interval_s": 10,
    "sample": "every interval; one-hour forecast = one step on hourly means (primary) and 6 "
    "steps on 10-minute means (second reading)",
    "hosts": "all 30 (epsilon averaged over hosts); the plot shows host 0",
    "smoothing": "cubic smoothing spline on each past window: parameter by GCV on hourly means, "
    "lam = 10 on 10-minute means (GCV there takes minutes)",
    "smoothing_lam_10min": 10.0,
    "method": "adjusted, replaced by mle when not stationary",
}




def price_history(seed: int, hours: float = AR6["history_h"]) -> np.ndarray:
    """Every host's spot price at every interval (rows) over ``hours`` of §5.4's load:
    tycoon-funding's job load repeated in rounds, with budgets drawn from a normal law (the
    seed's ``workload`` stream)."""
    rng = seeds.stream(seed, seeds.WORKLOAD)
    steps = int(hours * HOUR / AR6["interval_s"])
    out: list[np.ndarray] = []
    while sum(p.shape[0] for p in out) < steps:
        jobs = [TycoonJob(f"user{i + 1}", max(20.0, float(rng.normal(300.0, 100.0))),
                          AR6["deadline_h"] * HOUR, launch_s=i * FUNDING["launch_gap_s"],
                          subjobs=FUNDING["subjobs"], work_s=FUNDING["subjob_cpu_min"] * 60.0)
                for i in range(FUNDING["users"])]
        cfg = funding_config(False, seed * 1000 + len(out), record_every=1)
        out.append(simulate(replace(cfg, interval_s=AR6["interval_s"]), jobs).prices)
    return np.concatenate(out)[:steps]


def _means(x: np.ndarray, per: int) -> np.ndarray:
    n = x.size // per
    return np.asarray(x[: n * per].reshape(n, per).mean(axis=1))


def _ar6_host(x: np.ndarray) -> dict[str, float]:
    """ε of each forecast on one host's per-interval prices ``x``."""
    order, hour = AR6["order"], int(HOUR / AR6["interval_s"])
    hourly, tenmin = _means(x, hour), _means(x, hour // 6)
    fit = AR6["fit_h"]
    out: dict[str, float] = {}
    lam10 = AR6["smoothing_lam_10min"]
    for key, series, train, h, lam in (("", hourly, fit, 1, None),
                                       ("_10min", tenmin, 6 * fit, 6, lam10)):
        if np.ptp(series[:train]) == 0:  # a host no job used while fitting: no model
            return {}
        plain = ar.backtest(series, train, order, h, stationary=True)
        smooth = ar.backtest(series, train, order, h, smoothing=True, lam=lam, stationary=True)
        paper = ar.backtest(series, train, order, h, method="paper", smoothing=True, lam=lam)
        out |= {
            f"epsilon_ar{key}": float(smooth["epsilon_ar"]),  # type: ignore[arg-type]
            f"epsilon_ar_unsmoothed{key}": float(plain["epsilon_ar"]),  # type: ignore[arg-type]
            f"epsilon_ar_paper_autocorrelation{key}": float(paper["epsilon_ar"]),  # type: ignore[arg-type]
            f"epsilon_naive{key}": float(smooth["epsilon_naive"]),  # type: ignore[arg-type]
            f"mle_fallback{key}": float(smooth["model"].method == "mle"),  # type: ignore[attr-defined]
        }
    return out


AR6_KEYS = tuple(f"{k}{s}" for s in ("", "_10min") for k in (
    "epsilon_ar", "epsilon_ar_unsmoothed", "epsilon_ar_paper_autocorrelation", "epsilon_naive",
    "mle_fallback"))


def tycoon_ar6(run: SeedRun) -> dict[str, Any]:
    prices = price_history(run.seed)
    hosts = [_ar6_host(prices[:, j]) for j in range(prices.shape[1])]
    used = [h for h in hosts if h]
    x = _means(prices[:, 0], int(HOUR / AR6["interval_s"]))
    fit = AR6["fit_h"]
    s0 = ar.backtest(x, fit, AR6["order"], 1, smoothing=True, stationary=True)
    return {
        "label": run.label,
        "seed": run.seed,
        "hosts": len(used),
        **{k: float(np.mean([h[k] for h in used])) for k in AR6_KEYS},
        "ar_wins_on_hosts": sum(h["epsilon_ar"] < h["epsilon_naive"] for h in used),
        "coefficients": [float(c) for c in s0["model"].coefficients],  # type: ignore[attr-defined]
        "series": {
            "price": [round(float(v), 9) for v in x],
            "time_index": [int(i) for i in s0["time_index"]],  # type: ignore[attr-defined]
            "ar": [round(float(v), 9) for v in s0["ar"]],  # type: ignore[attr-defined]
        },
    }


def _ar6_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {k: float(np.mean([r[k] for r in rows])) for k in AR6_KEYS}
    wins = sum(r["ar_wins_on_hosts"] for r in rows)
    hosts = sum(r["hosts"] for r in rows)

    def pct(k: str) -> str:
        return f"{100 * summary[k]:.2f} %"

    md = [
        "# Tycoon §5.4: AR(6) one-hour price forecast",
        "",
        "Paper: an AR(6) model with a one-hour forecast and smoothing yields ε = 8.96 %; "
        "always predicting the current price yields 9.44 %.",
        "",
        "| forecast | ε, hourly means, 1 step | ε, 10-min means, 6 steps | paper |",
        "|---|---|---|---|",
        f"| AR(6), smoothed | {pct('epsilon_ar')} | {pct('epsilon_ar_10min')} | 8.96 % |",
        f"| AR(6), not smoothed | {pct('epsilon_ar_unsmoothed')} | "
        f"{pct('epsilon_ar_unsmoothed_10min')} | - |",
        f"| AR(6), smoothed, the paper's raw autocorrelation | "
        f"{pct('epsilon_ar_paper_autocorrelation')} | "
        f"{pct('epsilon_ar_paper_autocorrelation_10min')} | - |",
        f"| the price stays (naive) | {pct('epsilon_naive')} | {pct('epsilon_naive_10min')} | "
        "9.44 % |",
        "",
        f"Mean over {len(rows)} seed(s) of the mean over the hosts some job used while fitting; "
        f"smoothed AR(6) beats the naive forecast (hourly) on {wins} of {hosts} host series. "
        f"Share of smoothed fits whose adjusted autocorrelation gave an explosive model "
        f"(replaced by the mle fit): {pct('mle_fallback')} hourly, "
        f"{pct('mle_fallback_10min')} at 10 min.",
        "",
    ]
    return {**summary, "ar_wins_on_hosts": wins, "host_series": hosts, "markdown": "\n".join(md)}


def _ar6_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    s = doc["runs"][0]["series"]
    hours = np.arange(len(s["price"])) + 0.5
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(hours, s["price"], lw=0.8, label="measured price (host 0, hourly means)")
    ax.plot(hours[s["time_index"]], s["ar"], lw=1.0, label="AR(6), 1 h ahead, smoothed")
    ax.axvline(AR6["fit_h"], color="grey", ls="--", lw=0.8)
    ax.set_xlabel("hour")
    ax.set_ylabel("price (credits per CPU-second)")
    ax.set_title("Tycoon Fig. 4: AR(6) prediction with a one-hour forecast")
    ax.legend()
    save_figure(fig, path)


EXPERIMENTS.register(Experiment(
    "tycoon-ar6", "Tycoon §5.4 / Fig. 4: AR(6) price prediction",
    "AR(6) with a one-hour forecast and smoothing: ε = 8.96 %; the price stays: 9.44 %.",
    seed_runs, _ar6_derive, _ar6_plot, dict(AR6), tycoon_ar6, sweeps_load=False))
