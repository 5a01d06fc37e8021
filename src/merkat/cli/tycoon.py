"""``merkat tycoon best-response``: Tycoon's Best Response bids (eq. 1-2) for a budget over a
set of hosts; ``merkat bench tycoon``: its speed and a ``tycoon-funding`` run's."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

from merkat.cli import bench
from merkat.cli._common import OutputFormat, OutputOption, emit, fail, print_json, print_table

app = typer.Typer(help="Tycoon's per-host auctions and Best Response.", no_args_is_help=True)


def _hosts(path: Path) -> tuple[list[str], list[float], list[float], list[float] | None]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        fail(f"{path}: not valid JSON: {exc}")
    if not isinstance(data, list) or not data:
        fail(f"{path}: expected a non-empty list of hosts [{{\"id\", \"weight\", \"others\"}}]")
    ids: list[str] = []
    w: list[float] = []
    y: list[float] = []
    caps: list[float] = []
    any_cap = False
    for i, h in enumerate(data):
        if not isinstance(h, dict):
            fail(f"{path}: host {i}: expected an object")
        for key in ("id", "weight", "others"):
            if key not in h:
                fail(f"{path}: host {i}: missing field {key!r}")
        hid = str(h["id"])
        if hid in ids:
            fail(f"{path}: host {i}: duplicate id {hid!r}")
        ids.append(hid)
        for key, out in (("weight", w), ("others", y)):
            v = h[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                fail(f"{path}: host {hid!r}: {key} must be a finite number >= 0, got {v!r}")
            out.append(float(v))
        cap = h.get("cap")
        if cap is None:
            caps.append(math.inf)
        else:
            if isinstance(cap, bool) or not isinstance(cap, int | float) or cap < 0 or math.isnan(cap):
                fail(f"{path}: host {hid!r}: cap must be a number >= 0, got {cap!r}")
            caps.append(float(cap))
            any_cap = True
    return ids, w, y, caps if any_cap else None


@app.command("best-response")
def best_response_cmd(
    budget: float = typer.Option(..., "--budget", help="Budget X (credits per second) >= 0."),
    hosts: Path = typer.Option(..., "--hosts", help='JSON: [{"id", "weight", "others", "cap"?}].'),
    reserve: float = typer.Option(0.0, "--reserve", help="Reserve price for empty hosts."),
    output: OutputFormat = OutputOption,
) -> None:
    """Spread a budget over hosts to maximise Σ w·x/(x + y) (Tycoon eq. 1-2, capped when hosts
    have "cap")."""
    from merkat.market.best_response import BestResponseError, best_response

    if not math.isfinite(budget) or budget < 0:
        fail(f"--budget: must be a finite number >= 0, got {budget}")
    if not math.isfinite(reserve) or reserve < 0:
        fail(f"--reserve: must be a finite number >= 0, got {reserve}")
    ids, w, y, caps = _hosts(hosts)
    try:
        r = best_response(budget, w, y, caps=caps, reserve=reserve)
    except BestResponseError as exc:
        fail(f"{hosts}: {exc}")
    doc: dict[str, Any] = {
        "bids": {i: float(x) for i, x in zip(ids, r.bids, strict=True)},
        "utility": r.utility,
        "unspent": r.unspent,
    }

    def show() -> None:
        print_table(f"best response (utility {r.utility:.6g}, unspent {r.unspent:.6g})",
                    ["host", "weight", "others", "bid"],
                    [[i, wj, yj, float(x)] for i, wj, yj, x in zip(ids, w, y, r.bids, strict=True)])

    emit(output, doc, show)


_CONFIG_KEYS = {"hosts": int, "cpus_per_host": float, "vm_cpus": float, "interval_s": float,
                "reserve": float, "capped": bool, "beta": float, "seed": int,
                "sls_limit": int, "sls_refresh_s": float, "sls_ttl_s": float}


def _field(obj: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in obj:
        if default is None:
            fail(f"{where}: missing field {key!r}")
        return default
    v = obj[key]
    if kind is bool:
        if not isinstance(v, bool):
            fail(f"{where}: {key} must be true or false, got {v!r}")
        return v
    if kind is str:
        if not isinstance(v, str) or not v:
            fail(f"{where}: {key} must be a non-empty string, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        fail(f"{where}: {key} must be a finite number, got {v!r}")
    if kind is int and v != int(v):
        fail(f"{where}: {key} must be an integer, got {v!r}")
    return kind(v)


MAX_START_INTERVALS = 1_000_000
"""The latest launch or boost, in intervals from the start (10^7 s at the default 10 s)."""


def load_scenario(path: Path) -> tuple[Any, list[Any], list[Any]]:
    """A Tycoon scenario file: ``{"config": {...}, "jobs": [...], "boosts": [...]}``."""
    from merkat.worlds.tycoon.simulator import Boost, TycoonConfig, TycoonJob

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        fail(f"{path}: not valid JSON: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        fail(f"{path}: expected an object with a non-empty list \"jobs\"")
    cfg_in = data.get("config", {})
    if not isinstance(cfg_in, dict):
        fail(f"{path}: config must be an object")
    unknown = set(cfg_in) - set(_CONFIG_KEYS)
    if unknown:
        fail(f"{path}: config: unknown field(s) {', '.join(sorted(unknown))}")
    cfg = {k: _field(cfg_in, k, t, f"{path}: config") for k, t in _CONFIG_KEYS.items()
           if k in cfg_in}
    checks = {"hosts": (1, 100_000), "cpus_per_host": (1e-9, 1e6), "vm_cpus": (1e-9, 1e6),
              "interval_s": (1e-3, 86_400), "reserve": (1e-12, 1e9), "beta": (1e-9, 1),
              "sls_limit": (1, 100_000), "sls_refresh_s": (0, 86_400),
              "sls_ttl_s": (1e-3, 10 * 86_400)}
    for k, (lo, hi) in checks.items():
        if k in cfg and not lo <= cfg[k] <= hi:
            fail(f"{path}: config: {k} must be in [{lo:g}, {hi:g}], got {cfg[k]}")
    # every interval is simulated, jobs or not: a launch or boost in 10^15 s never came
    latest = MAX_START_INTERVALS * cfg.get("interval_s", TycoonConfig.interval_s)
    jobs = []
    for i, j in enumerate(data["jobs"]):
        where = f"{path}: jobs[{i}]"
        if not isinstance(j, dict):
            fail(f"{where}: expected an object")
        job = TycoonJob(
            _field(j, "user", str, where),
            _field(j, "budget", float, where),
            _field(j, "deadline_h", float, where) * 3600.0,
            launch_s=_field(j, "launch_s", float, where, 0.0),
            subjobs=_field(j, "subjobs", int, where, 15),
            work_s=_field(j, "work_min", float, where, 212.0) * 60.0,
        )
        if job.budget <= 0 or job.deadline_s <= 0 or job.launch_s < 0 or job.work_s <= 0:
            fail(f"{where}: budget, deadline_h and work_min must be > 0, launch_s >= 0")
        if not 1 <= job.subjobs <= 10_000:
            fail(f"{where}: subjobs must be in [1, 10000], got {job.subjobs}")
        if job.launch_s > latest:
            fail(f"{where}: launch_s must be <= {latest:g} ({MAX_START_INTERVALS:,} intervals "
                 f"of the simulation), got {job.launch_s:g}")
        jobs.append(job)
    boosts = []
    for i, b in enumerate(data.get("boosts", [])):
        where = f"{path}: boosts[{i}]"
        if not isinstance(b, dict):
            fail(f"{where}: expected an object")
        boost = Boost(_field(b, "time_s", float, where), _field(b, "user", str, where),
                      _field(b, "amount", float, where))
        if boost.amount <= 0 or boost.time_s < 0:
            fail(f"{where}: amount must be > 0 and time_s >= 0")
        if boost.time_s > latest:
            fail(f"{where}: time_s must be <= {latest:g} ({MAX_START_INTERVALS:,} intervals "
                 f"of the simulation), got {boost.time_s:g}")
        boosts.append(boost)
    return _config(TycoonConfig, cfg, f"{path}: config"), jobs, boosts


def _config(kind: Any, fields: dict[str, Any], where: str) -> Any:
    """``kind(**fields)``; its own checks (the SLS's ttl against its refresh) fail in one line."""
    try:
        return kind(**fields, record_every=0)
    except ValueError as exc:
        fail(f"{where}: {exc}")


@app.command("run")
def run_cmd(
    scenario: Path = typer.Argument(..., help='JSON: {"config": {...}, "jobs": [...], '
                                    '"boosts": [...]} (docs/tycoon.md).'),
    background_prices: Path | None = typer.Option(
        None, "--background-prices",
        help="Replay a live run's prices as the other users' demand: the file written by "
             "`merkat prices --since T -o json|csv` (docs/tycoon.md, Background prices)."),
    background_period: float | None = typer.Option(
        None, "--background-period",
        help="The recorded period's length in seconds (default: the median gap between rows)."),
    background_scale: float = typer.Option(
        1.0, "--background-scale",
        help="Multiply the recorded prices (live credits to the scenario's currency)."),
    sls_limit: int | None = typer.Option(
        None, "--sls-limit", min=1, max=100_000,
        help="The most hosts the Service Location Service returns to an agent, best first by "
             "Best Response's w/y (default: the scenario's config.sls_limit, else every host)."),
    sls_refresh: float | None = typer.Option(
        None, "--sls-refresh", min=0.0, max=86_400.0,
        help="Seconds between the hosts' refreshes of their SLS records (0: before every "
             "query, never stale; default: the scenario's config.sls_refresh_s, else 0)."),
    output: OutputFormat = OutputOption,
) -> None:
    """Run a Tycoon market scenario in the simulator: hosts registered in the Service Location
    Service, jobs funded by transfer tokens, Best Response agents over the hosts it returns,
    charging by use, refunds, boosts; print each job's outcome."""
    from dataclasses import replace

    from merkat.worlds.tycoon.background import PriceFileError, read_price_export
    from merkat.worlds.tycoon.simulator import simulate

    if not (math.isfinite(background_scale) and background_scale >= 0):
        fail(f"--background-scale: must be a finite number >= 0, got {background_scale}")
    if background_period is not None and not (math.isfinite(background_period)
                                               and background_period > 0):
        fail(f"--background-period: must be a finite number > 0, got {background_period}")
    cfg, jobs, boosts = load_scenario(scenario)
    over = {k: v for k, v in (("sls_limit", sls_limit), ("sls_refresh_s", sls_refresh))
            if v is not None}
    if over:
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__ if f != "record_every"}
        cfg = _config(type(cfg), fields | over, "--sls-limit/--sls-refresh")
    series = None
    if background_prices is not None:
        try:
            series = read_price_export(background_prices, background_period)
        except PriceFileError as exc:
            fail(str(exc))
        series = replace(series, cpu=series.cpu * background_scale,
                         memory=series.memory * background_scale)
    try:
        res = simulate(cfg, jobs, boosts, series)
    except ValueError as exc:
        fail(f"{scenario}: {exc}")
    doc: dict[str, Any] = {
        "items": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                   for k, v in j.items()} for j in res.jobs],
        "audit_ok": res.audit_ok,
        "minted": res.minted,
        "provider_income": res.provider_income,
        "refunded": res.refunded,
        "sls": {"limit": cfg.sls_limit, "refresh_s": cfg.sls_refresh_s, "ttl_s": cfg.sls_ttl},
    }
    if series is not None:
        doc["background"] = {"file": str(background_prices), "rows": int(series.times.size),
                             "period_s": series.period_s,
                             "mean_cpu_price_per_s": float(series.cpu.mean())}

    def show() -> None:
        print_table("jobs", ["job", "user", "budget", "boosted", "nodes", "complete", "time (h)",
                             "cost", "cost/h", "refund"],
                    [[j["job"], j["user"], j["budget"], j["boosted"], j["nodes"], j["complete"],
                      j["time_h"], j["cost"], j["cost_per_h"], j["refund"]]
                     for j in doc["items"]])
        print_table("money", ["minted", "provider income", "refunded", "audit"],
                    [[res.minted, res.provider_income, res.refunded,
                      "ok" if res.audit_ok else "FAILED"]])

    emit(output, doc, show)


@bench.app.command("tycoon")
def bench_tycoon(
    hosts: int = typer.Option(10_000, "--hosts", min=1, max=10_000_000,
                              help="Hosts for the Best Response timing."),
    repeat: int = typer.Option(20, "--repeat", min=1, max=10_000, help="Best Response calls."),
    funding: bool = typer.Option(True, "--funding/--no-funding",
                                 help="Also time one tycoon-funding run (Table 2)."),
) -> None:
    """Best Response for one user over N hosts (target <= 10 ms at 10,000) and one
    tycoon-funding run (target <= 30 s); prints JSON."""
    from merkat.bench.tycoon import run

    print_json(run(hosts, repeat, funding))
