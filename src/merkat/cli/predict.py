"""``merkat predict stats|normal|ar|portfolio --history FILE``: Tycoon §4's price prediction on
a price history, for users who want the numbers without code (see :mod:`merkat.predict`).

FILE is CSV (a header with a ``price`` column; for ``portfolio`` one column per host) or JSON
(a list of prices, ``{"price": [...]}``, a list of objects with ``"price"``; for ``portfolio``
an object ``{host: [prices]}``), or the live platform's export (``merkat prices --since T -o
json|csv``: the CPU price per period is the series). numpy/scipy are imported inside the commands.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import OutputFormat, OutputOption, emit, fail, print_table

app = typer.Typer(help="Price prediction (Tycoon §4) on a price history.", no_args_is_help=True)

HistoryOption = typer.Option(
    ..., "--history",
    help="Prices: CSV with a 'price' column, JSON, or a live export (`merkat prices --since T "
         "-o json|csv`: its cpu column).")
EXPORT_COLUMNS = ("period", "time", "cpu", "memory")


def _number(v: Any, where: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        fail(f"{where}: not a number: {v!r}")
    if not math.isfinite(x):
        fail(f"{where}: not a finite number: {v!r}")
    return x


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError:
        fail(f"{path}: not a text file")


def read_columns(path: Path) -> dict[str, list[float]]:
    """The file's price columns by name (a single series is called ``price``)."""
    text = _read(path)
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            fail(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
        if isinstance(data, dict) and "price" in data:
            data = data["price"]
        elif isinstance(data, dict) and isinstance(data.get("items"), list):
            return _export_columns(path, data["items"])
        if isinstance(data, list):
            out = []
            for i, v in enumerate(data):
                if isinstance(v, dict):
                    if "price" not in v:
                        fail(f"{path}: item {i}: no 'price' field")
                    v = v["price"]
                out.append(_number(v, f"{path}: item {i}"))
            return {"price": out}
        if isinstance(data, dict):
            cols: dict[str, list[float]] = {}
            for k, vs in data.items():
                if not isinstance(vs, list):
                    fail(f"{path}: host {k!r}: expected a list of prices")
                cols[str(k)] = [_number(v, f"{path}: host {k!r} item {i}") for i, v in enumerate(vs)]
            return cols
        fail(f"{path}: expected a list of prices or an object of price lists")
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        fail(f"{path}: empty file")
    header = [c.strip() for c in rows[0]]
    cols = {h: [] for h in header}
    for ln, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            fail(f"{path}: line {ln}: {len(r)} fields, the header has {len(header)}")
        for h, v in zip(header, r, strict=True):
            cols[h].append(_number(v.strip(), f"{path}: line {ln} column {h!r}"))
    return cols


def _export_columns(path: Path, items: list[Any]) -> dict[str, list[float]]:
    """The columns of ``merkat prices --since T -o json`` (``{"items": [{period, time, cpu,
    memory}]}``)."""
    cols: dict[str, list[float]] = {c: [] for c in EXPORT_COLUMNS}
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            fail(f"{path}: item {i}: expected an object")
        for c in EXPORT_COLUMNS:
            v = it.get(c)
            cols[c].append(math.nan if v is None and c == "time"
                           else _number(v, f"{path}: item {i} {c!r}"))
    return cols


def read_prices(path: Path) -> list[float]:
    """The single price series of ``path``: its ``price`` column, its only column, or the
    ``cpu`` column of a live export (``merkat prices --since T -o json|csv``)."""
    cols = read_columns(path)
    if "price" in cols:
        prices = cols["price"]
    elif "cpu" in cols and "time" in cols:
        prices = cols["cpu"]
    elif len(cols) == 1:
        prices = next(iter(cols.values()))
    else:
        fail(f"{path}: no 'price' column (columns: {', '.join(cols)})")
    if not prices:
        fail(f"{path}: no prices")
    return prices


def _prob(p: float) -> float:
    if not 0 < p < 1:
        fail(f"--probability: must be in (0, 1), got {p}")
    return p


@app.command("stats")
def stats_cmd(
    history: Path = HistoryOption,
    window: float = typer.Option(360.0, "--window", help="Smoothing window n (snapshots) >= 1."),
    slots_n: int = typer.Option(10, "--slots", help="Slots of the window's price distribution."),
    output: OutputFormat = OutputOption,
) -> None:
    """Running mean and sd (§4.2), smoothed moments over a window and its slot table (§4.5)."""
    from merkat.predict.moments import RunningMoments, smoothed_moments
    from merkat.predict.slots import SlotTable

    if not window >= 1 or not math.isfinite(window):
        fail(f"--window: must be a number >= 1, got {window}")
    if not 1 <= slots_n <= 1000:
        fail(f"--slots: must be in [1, 1000], got {slots_n}")
    x = read_prices(history)
    run = RunningMoments().extend(x)
    sm = smoothed_moments(x, window)
    table = SlotTable(window=max(1, int(window)), slots=slots_n)
    for v in x:
        table.add(v)
    edges, props = table.distribution()
    doc: dict[str, Any] = {
        "count": run.count,
        "mean": run.mean,
        "std": run.std(),
        "window": window,
        "smoothed": {k: float(v[-1]) for k, v in sm.items()},
        "distribution": {"edges": [float(e) for e in edges], "proportions": [float(p) for p in props]},
    }

    def show() -> None:
        s = doc["smoothed"]
        print_table("prices", ["count", "mean", "sd", f"window {window:g}: mean", "sd",
                               "skewness", "kurtosis"],
                    [[run.count, doc["mean"], doc["std"], s["mean"], s["std"], s["skewness"],
                      s["kurtosis"]]])
        print_table("window distribution", ["from", "to", "proportion"],
                    [[float(edges[i]), float(edges[i + 1]), float(props[i])]
                     for i in range(len(props))])

    emit(output, doc, show)


@app.command("normal")
def normal_cmd(
    history: Path = HistoryOption,
    probability: float = typer.Option(0.9, "--probability", "-p", help="Guarantee level p."),
    budget: float | None = typer.Option(None, "--budget", help="Bid (credits/s): share it buys."),
    share: float | None = typer.Option(None, "--share", help="Share in (0,1): bid it needs."),
    capacity: float = typer.Option(1.0, "--capacity", help="The host's capacity w."),
    output: OutputFormat = OutputOption,
) -> None:
    """The price not exceeded with probability p on one host, and what a bid buys (or the bid
    a share needs) with that probability (Tycoon §4.2, equations 3-6). Prices are the others' bids (credits/s)."""
    from merkat.predict import normal
    from merkat.predict.moments import RunningMoments

    p = _prob(probability)
    if budget is not None and not (math.isfinite(budget) and budget >= 0):
        fail(f"--budget: must be a finite number >= 0, got {budget}")
    if share is not None and not 0 < share < 1:
        fail(f"--share: must be in (0, 1), got {share}")
    if not (math.isfinite(capacity) and capacity > 0):
        fail(f"--capacity: must be a finite number > 0, got {capacity}")
    run = RunningMoments().extend(read_prices(history))
    mu, sd = run.mean, run.std()
    yp = float(normal.price_at(p, mu, sd))
    doc: dict[str, Any] = {"mean": mu, "std": sd, "probability": p, "price": yp}
    if budget is not None:
        doc["budget"] = budget
        doc["utility"] = normal.utility_at(budget, [capacity], [mu], [sd], p, reserve=1e-12)
    if share is not None:
        doc["share"] = share
        doc["budget_for_share"] = normal.budget_for(share * capacity, [capacity], [mu], [sd], p,
                                                    reserve=1e-12)

    def show() -> None:
        print_table(f"normal guarantees (p = {p})", list(doc), [list(doc.values())])

    emit(output, doc, show)


@app.command("ar")
def ar_cmd(
    history: Path = HistoryOption,
    order: int = typer.Option(..., "--order", help="AR order k >= 1."),
    method: str = typer.Option("adjusted", "--method", help="paper | adjusted | mle."),
    steps: int = typer.Option(0, "--steps", help="Also forecast this many steps ahead."),
    smooth: bool = typer.Option(False, "--smooth", help="Smooth (cubic spline) before fitting."),
    output: OutputFormat = OutputOption,
) -> None:
    """Fit AR(k) by Yule-Walker/Levinson-Durbin (§4.3); optionally forecast."""
    from merkat.predict import ar

    if method not in ar.METHODS:
        fail(f"--method: must be one of {', '.join(ar.METHODS)}, got {method!r}")
    if order < 1:
        fail(f"--order: must be >= 1, got {order}")
    if not 0 <= steps <= 100_000:
        fail(f"--steps: must be in [0, 100000], got {steps}")
    x = read_prices(history)
    if len(x) <= order:
        fail(f"{history}: {len(x)} prices are too few for AR({order})")
    series = ar.smooth(x) if smooth else x
    try:
        model = ar.fit(series, order, method)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(f"{history}: {exc}")
    doc: dict[str, Any] = model.to_json()
    if steps:
        doc["forecast"] = [float(v) for v in model.forecast(series, steps)]
        doc["forecast_variance"] = [float(v) for v in model.forecast_variance(steps)]

    def show() -> None:
        print_table(f"AR({order}), {method}", ["mean", "sigma2", "coefficients"],
                    [[model.mean, model.sigma2, ", ".join(f"{a:.4g}" for a in model.coefficients)]])
        if steps:
            print_table("forecast", ["step", "price", "error variance"],
                        [[i + 1, f, v] for i, (f, v) in
                         enumerate(zip(doc["forecast"], doc["forecast_variance"], strict=True))])

    emit(output, doc, show)


@app.command("portfolio")
def portfolio_cmd(
    history: Path = HistoryOption,
    capacity: float = typer.Option(1.0, "--capacity", help="Capacity per host (return = c/price)."),
    points: int = typer.Option(10, "--points", help="Points on the efficient frontier."),
    output: OutputFormat = OutputOption,
) -> None:
    """Minimum-variance portfolio and efficient frontier across hosts (§4.4); FILE holds one
    price column per host, the return is capacity per credit."""
    import numpy as np

    from merkat.predict import portfolio

    if not (math.isfinite(capacity) and capacity > 0):
        fail(f"--capacity: must be a finite number > 0, got {capacity}")
    if not 2 <= points <= 1000:
        fail(f"--points: must be in [2, 1000], got {points}")
    cols = read_columns(history)
    names = list(cols)
    lengths = {len(v) for v in cols.values()}
    if len(lengths) != 1 or min(lengths) < 2:
        fail(f"{history}: every host needs the same number (>= 2) of prices")
    try:
        rets = portfolio.returns(np.array([cols[n] for n in names]).T, capacity)
        m, cov = portfolio.sample_statistics(rets)
        low = portfolio.minimum_variance(m, cov)
        frontier = portfolio.efficient_frontier(m, cov, points) if len(names) > 1 else [low]
    except ValueError as exc:
        fail(f"{history}: {exc}")
    doc = {
        "hosts": names,
        "minimum_variance": {"weights": dict(zip(names, map(float, low.weights), strict=True)),
                             "mean": low.mean, "std": low.std},
        "frontier": [{"mean": pf.mean, "std": pf.std,
                      "weights": dict(zip(names, map(float, pf.weights), strict=True))}
                     for pf in frontier],
    }

    def show() -> None:
        print_table("minimum-variance portfolio", ["host", "weight"],
                    [[n, float(w)] for n, w in zip(names, low.weights, strict=True)])
        print_table("efficient frontier", ["return", "sd"], [[pf.mean, pf.std] for pf in frontier])

    emit(output, doc, show)
