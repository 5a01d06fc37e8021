"""The report of a live server's history: its database, over a time range.

Read-only: the database is opened, never created or upgraded (a wrong URL is an error, not a
new empty database). What it shows, for ``since <= time <= until``:

- figures: CPU and memory prices per period; events per period by kind (admissions, VM
  operations, state changes); each platform's life (submitted, running, ended) as bars;
- tables: platforms (owner, state, times, outcome, VM charges in the range, balance now);
  events by kind; price statistics per resource;
- parameters: the database, the range, the periods it covers.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from merkat.defaults import MICRO
from merkat.outputs import time_text
from merkat.report.model import Figure, Report, ReportError, Table


def shown_url(url: str) -> str:
    """``url`` as the report and its errors print it: a password as ``***`` (the page is
    made to be mailed; ``postgresql://merkat:SECRET@db/merkat`` was printed in it)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url


def _engine(url: str) -> Any:
    from sqlalchemy import create_engine, inspect

    shown = shown_url(url)  # as given (not the read-only form opened), its password hidden
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///") :])
        if not path.is_file():
            raise ReportError(f"RUN: no such database file: {path}")
        url = f"sqlite:///file:{path}?mode=ro&uri=true"
    try:
        engine = create_engine(url)
        tables = set(inspect(engine).get_table_names())
    except Exception as e:  # driver errors: one line naming the database
        raise ReportError(f"RUN: cannot open database {shown}: {str(e).splitlines()[0]}"
                          ) from None
    if "svc_prices" not in tables or "svc_events" not in tables:
        raise ReportError(f"RUN: {shown} is not a merkat server database (no svc_prices table)")
    return engine


def _fig(plt: Any, fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _stamp(t: float | None) -> str | None:
    """A time in UTC; ``-`` for one no clock prints (``--since 1e300``, a row's NaN)."""
    return time_text(t, "%Y-%m-%d %H:%M:%S UTC", utc=True)


def live_history(url: str, since: float | None = None, until: float | None = None) -> Report:
    """The report of the server database at ``url`` between ``since`` and ``until`` (Unix
    seconds; None: from the first / to the last record)."""
    from sqlalchemy import select

    from merkat.service import schema as s

    engine = _engine(url)
    lo = -float("inf") if since is None else since
    hi = float("inf") if until is None else until
    with engine.connect() as conn:
        prices = [
            dict(r._mapping)
            for r in conn.execute(select(s.prices).order_by(s.prices.c.period))
            if lo <= r.time <= hi
        ]
        events = [
            dict(r._mapping)
            for r in conn.execute(select(s.events).order_by(s.events.c.id))
            if lo <= r.time <= hi
        ]
        platforms = [
            dict(r._mapping)
            for r in conn.execute(select(s.platforms).order_by(s.platforms.c.submitted))
            if r.submitted <= hi and (r.ended is None or r.ended >= lo)
        ]
    spent, balances = _money(url, {p["period"] for p in prices},
                             {p["name"]: a for p in platforms if (a := _account(p))})
    if not prices and not events:
        raise ReportError(f"RUN: no period and no event in the range ({_range(since, until)})")
    t0 = min([p["time"] for p in prices] + [e["time"] for e in events])
    t1 = max([p["time"] for p in prices] + [e["time"] for e in events])
    figures = _figures(prices, events, platforms, t0, t1)
    rows = tuple(
        (
            p["name"], p["owner"], p["state"], _stamp(p["submitted"]), _stamp(p["started"]),
            _stamp(p["ended"]), p["outcome"] or None,
            spent.get(p["name"], 0) / MICRO, balances.get(p["name"]),
        )
        for p in platforms
    )  # fmt: skip
    tables = [
        Table(
            "Platforms",
            (
                "platform",
                "owner",
                "state",
                "submitted",
                "started",
                "ended",
                "outcome",
                "charged in range",
                "balance now",
            ),
            rows,
        ),
        Table(
            "Events by kind",
            ("kind", "events"),
            tuple(sorted(Counter(e["kind"] for e in events).items())),
        ),
        Table(
            "Prices (credits per unit per period)",
            ("resource", "min", "mean", "max", "last"),
            tuple(
                (r, min(v), sum(v) / len(v), max(v), v[-1])
                for r in ("cpu", "memory")
                if (v := [p[r] for p in prices])
            ),
        ),
    ]
    params = {
        "database": shown_url(url),
        "since": _stamp(since) or "first record",
        "until": _stamp(until) or "last record",
        "first": _stamp(t0),
        "last": _stamp(t1),
        "periods": len(prices),
        "first period": prices[0]["period"] if prices else None,
        "last period": prices[-1]["period"] if prices else None,
        "events": len(events),
        "platforms": len(platforms),
    }
    return Report("live", "Live market history", params, tables, figures)


def _range(since: float | None, until: float | None) -> str:
    return f"{_stamp(since) or 'start'} .. {_stamp(until) or 'end'}"


def _account(row: dict[str, Any]) -> str | None:
    """A platform's bank account: the one its row names (set at admission); none while it
    is queued (a queued ``x`` whose name was used before does not own the first ``x``'s
    ``app:x``); ``app:NAME`` for a row admitted before the column was kept."""
    if row.get("account"):
        return str(row["account"])
    return f"app:{row['name']}" if row.get("started") is not None else None


def _money(url: str, periods: set[int], accounts: dict[str, str]
           ) -> tuple[dict[str, int], dict[str, str]]:
    """VM charges paid by each platform in ``periods`` and each platform's balance now.
    ``accounts``: each platform's bank account as its row says (``app:NAME``, ``app:NAME@2``
    for the second platform of that name: the first one's account is not hers). A charge is
    a payment from the account, or from its deposit (``ACCOUNT:hold``, charging by use), to
    a provider account (whatever the server's configuration named it)."""
    from merkat.bank.db import open_ledger
    from merkat.bank.errors import BankError
    from merkat.bank.ledger import AccountKind
    from merkat.bank.money import format_amount
    from merkat.bank.policies import hold_account

    spent: dict[str, int] = {}
    balances: dict[str, str] = {}
    try:
        ledger = open_ledger(url)
    except (BankError, OSError):
        return spent, balances
    try:
        providers = {a.name for a in ledger.accounts(AccountKind.provider)}
        for name, account in accounts.items():
            if not ledger.has_account(account):
                continue
            balances[name] = format_amount(ledger.balance(account))
            payers = {account, hold_account(account)}
            spent[name] = sum(
                t.amount
                for a in payers if ledger.has_account(a)
                for t in ledger.history(a)
                if t.payer == a and t.period in periods and t.payee in providers
            )
    finally:
        ledger.close()
    return spent, balances


def _figures(
    prices: list[dict[str, Any]],
    events: list[dict[str, Any]],
    platforms: list[dict[str, Any]],
    t0: float,
    t1: float,
) -> list[Figure]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def minutes(t: float) -> float:
        return (t - t0) / 60.0

    out = []
    fig, ax = plt.subplots(figsize=(9, 3.5))
    if prices:
        x = [minutes(p["time"]) for p in prices]
        ax.plot(x, [p["cpu"] for p in prices], drawstyle="steps-post", label="cpu (per core)")
        ax.set_ylabel("cpu price")
        ax2 = ax.twinx()
        ax2.plot(
            x,
            [p["memory"] for p in prices],
            drawstyle="steps-post",
            color="tab:red",
            label="memory (per MiB)",
        )
        ax2.set_ylabel("memory price")
        fig.legend(loc="upper right")
    ax.set_xlabel(f"minutes since {_stamp(t0)}")
    ax.set_title("Prices per period (credits per unit per period)")
    out.append(Figure("CPU and memory prices", _fig(plt, fig)))

    fig, ax = plt.subplots(figsize=(9, 3.5))
    kinds = sorted({e["kind"] for e in events})
    edges = [p["time"] for p in prices] or [t0]
    for kind in kinds:
        counts = Counter(_bin(edges, e["time"]) for e in events if e["kind"] == kind)
        xs = sorted(counts)
        ax.plot([minutes(edges[k]) for k in xs], [counts[k] for k in xs], "o", ms=4, label=kind)
    ax.set_xlabel(f"minutes since {_stamp(t0)}")
    ax.set_ylabel("events per period")
    ax.set_title("Events per period by kind")
    if kinds:
        ax.legend(fontsize=7, ncol=3)
    out.append(Figure("Events per period by kind", _fig(plt, fig)))

    fig, ax = plt.subplots(figsize=(9, 1.8 + 0.3 * len(platforms)))
    for k, p in enumerate(platforms):
        start = p["started"] if p["started"] is not None else None
        end = p["ended"] if p["ended"] is not None else t1
        ax.barh(
            k, minutes(end) - minutes(p["submitted"]), left=minutes(p["submitted"]), color="#d5d9e2"
        )
        if start is not None:
            ax.barh(k, minutes(end) - minutes(start), left=minutes(start), color="#2f5fb3")
    ax.set_yticks(range(len(platforms)), [p["name"] for p in platforms], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"minutes since {_stamp(t0)} (grey: waiting, blue: running)")
    ax.set_title("Platforms")
    out.append(Figure("Platforms' lives", _fig(plt, fig)))
    return out


def _bin(edges: list[float], t: float) -> int:
    """Index of the period whose start is the last one <= ``t`` (0 before the first)."""
    import bisect

    return max(0, bisect.bisect_right(edges, t) - 1)


def write_html(data: Path) -> tuple[Path | None, str]:
    """Write the HTML report of the server whose state is in ``data`` (its ``merkat.db``) as
    ``data/report.html``, as ``merkat report DATA --out FILE`` does; returns its path (None
    when it could not be written) and the command or the reason. Never raises (the demo hands
    it to :func:`merkat.service.demo.run`: its verdict does not depend on the page)."""
    from merkat.outputs import write_atomic
    from merkat.report.html import render as render_html

    path = data / "report.html"
    cmd = f"merkat report {data} --out {path}"
    try:
        write_atomic(path, render_html(live_history(
            f"sqlite:///{(data / 'merkat.db').resolve()}")))
    except Exception as exc:  # a bonus: the demo's verdict does not depend on it
        return None, f"{cmd} failed: {type(exc).__name__}: {exc}"
    return path, cmd
