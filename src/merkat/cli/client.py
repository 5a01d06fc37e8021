"""The client commands, talking to a running ``merkat server`` over its REST API.

``MERKAT_URL`` (default ``http://127.0.0.1:8080``) says where, ``MERKAT_TOKEN`` who (the key
``merkat user add`` printed); ``--url`` / ``--token`` override them. Tables by default,
``-o json`` for scripts (lists as ``{"items": [...]}``). Exit 2 on bad input (a 4xx: the
server's one-line reason), 1 when the server cannot be reached or fails.
Only the standard library is imported here (``urllib``): the commands start fast.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import (
    OutputFormat,
    OutputOption,
    emit,
    fail,
    print_json,
    print_table,
)
from merkat.cli.api import Client, TokenOption, UrlOption, _q, platform_path
from merkat.outputs import time_text

platform_app = typer.Typer(help="Virtual platforms on the server: list, show, stop, boost, logs, "
                           "delete.",
                           no_args_is_help=True)
account_app = typer.Typer(help="Your bank accounts on the server.", no_args_is_help=True)


# --- platforms ---------------------------------------------------------------------------------

TEMPLATE_READ = 64 << 20
"""The most of a template file ``merkat submit`` reads (a server takes 1 MiB by default,
``limits.body_bytes``): a device or an endless pipe is refused, not read until memory ends."""


def submit(
    file: Path = typer.Argument(..., help="A virtual platform template (YAML, or XML: .xml)."),
    parsable: bool = typer.Option(False, "--parsable", help="Print the platform name alone."),
    upload: bool = typer.Option(True, "--upload/--no-upload",
                                help="Upload the template's files_in found beside it first."),
    output: OutputFormat = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Submit a virtual platform template to the server's queue."""
    try:
        with open(file, "rb") as f:  # at most TEMPLATE_READ: /dev/zero took 8 GB in 4 s
            text = f.read(TEMPLATE_READ + 1)
    except OSError as exc:
        fail(f"FILE: cannot read {file}: {exc.strerror or exc}")
    if len(text) > TEMPLATE_READ:
        fail(f"FILE: {file} holds more than {TEMPLATE_READ >> 20} MiB: not a template")
    xml = file.suffix == ".xml" or text.lstrip().startswith(b"<")
    ctype = "application/xml" if xml else "application/yaml"
    client = Client(url, token)
    if upload and b"files_in" in text:
        from merkat.cli.files import upload_files_in

        upload_files_in(client, file, text, xml)
    row = client.request("POST", "/platforms", text, ctype)
    if parsable:
        print(row["name"])
        return
    emit(output, row, lambda: print(f"platform {row['name']} {row['state']} "
                                    f"(owner {row['owner']})"))


@platform_app.command("stop")
def platform_stop(name: str, output: OutputFormat = OutputOption, url: str | None = UrlOption,
                  token: str | None = TokenOption) -> None:
    """Shut a platform down now (its VMs are destroyed)."""
    p = Client(url, token).post(f"{platform_path(name)}/stop")
    emit(output, p, lambda: print(f"platform {p['name']}: {p['state']}"))


@platform_app.command("boost", context_settings={"ignore_unknown_options": True})
def platform_boost(name: str, amount: str = typer.Argument(..., help="Credits to add (> 0)."),
                   key: str | None = typer.Option(None, "--idempotency-key",
                                                  help="Retry-safe: the same key boosts once."),
                   output: OutputFormat = OutputOption, url: str | None = UrlOption,
                   token: str | None = TokenOption) -> None:
    """Add AMOUNT credits from your account to platform NAME while it runs (Tycoon's
    boosting): its controller bids the larger budget from the next period on."""
    if amount.strip().startswith("-"):  # "-5" reaches here as AMOUNT, not as an option
        fail(f"AMOUNT: a boost adds credits: give a positive amount, got {amount}")
    b = Client(url, token).post(f"{platform_path(name)}/boost",
                                {"amount": amount, "idempotency_key": key})
    emit(output, b, lambda: print(f"platform {b['name']}: boosted by {b['amount']}, "
                                  f"balance {b['balance']}"))


@platform_app.command("logs")
def platform_logs(name: str, tail: int = typer.Option(100, "--tail", min=1, max=100_000),
                  url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """The last lines of each VM's output."""
    sys.stdout.write(Client(url, token).request(
        "GET", f"{platform_path(name)}/logs?tail={tail}", raw=True))


# --- market ------------------------------------------------------------------------------------


class PriceFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


PRICE_COLUMNS = ("period", "time", "cpu", "memory")
HISTORY_LIMIT = 100_000  # the API's cap on one history request


def prices(watch: bool = typer.Option(False, "--watch", help="Print each new period's prices."),
           since: str | None = typer.Option(
               None, "--since", help="Export the price series from this time on: Unix seconds, "
               "ISO date-time (2026-11-23T21:00, UTC unless a zone is given) or 30m/2h/1d ago."),
           output: PriceFormat = typer.Option(
               PriceFormat.table, "--output", "-o", help="table (default), json or csv."),
           url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """The current prices (credits per core and per MiB, per period); with --since, the
    series since then (``-o json``: {"items": [...]}, ``-o csv``: period,time,cpu,memory),
    which ``merkat tycoon run --background-prices`` replays and ``merkat predict --history``
    reads."""
    from merkat.cli.timespec import parse_time

    if since is not None:
        if watch:
            fail("--since and --watch do not go together")
        try:
            t0 = parse_time(since, "--since")
        except ValueError as e:
            fail(str(e))
        items = Client(url, token).get("/prices/history", since=t0, limit=HISTORY_LIMIT)["items"]
        if len(items) >= HISTORY_LIMIT:
            print(f"warning: only the last {HISTORY_LIMIT} periods; give a later --since",
                  file=sys.stderr)
        _emit_prices(output, items)
        return
    c = Client(url, token)
    if not watch:
        p = c.get("/prices")
        print_json(p) if output is PriceFormat.json else _emit_prices(output, [p])
        return
    # --watch: one line per new period (a header once; -o json: one object a line, -o csv
    # rows), never a table redrawn each period
    last: Any = None
    first = True
    try:
        while True:
            p = c.get("/prices")
            if first or p["period"] != last:
                last = p["period"]
                if output is PriceFormat.json:
                    print(json.dumps(p))
                elif output is PriceFormat.csv:
                    _emit_prices(output, [p], header=first)
                else:
                    if first:
                        print(f"{'PERIOD':>8}  {'TIME':8}  {'CPU':>12}  {'MEMORY':>12}")
                    print(f"{_cell(p['period']):>8}  {_cell(_time(p['time'])):8}  "
                          f"{p['cpu']:>12.6g}  {p['memory']:>12.6g}")
                first = False
                sys.stdout.flush()
            time.sleep(1.0)
    except KeyboardInterrupt:
        return


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def _emit_prices(output: PriceFormat, items: list[dict[str, Any]], header: bool = True) -> None:
    if output is PriceFormat.json:
        print_json({"items": items})
    elif output is PriceFormat.csv:
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        if header:
            w.writerow(PRICE_COLUMNS)
        for p in items:
            w.writerow([p["period"], repr(float(p["time"])) if p["time"] is not None else "",
                        repr(float(p["cpu"])), repr(float(p["memory"]))])
    else:
        print_table(None, ["PERIOD", "TIME", "CPU", "MEMORY"],
                    [(p["period"], _time(p["time"]), p["cpu"], p["memory"]) for p in items])


def nodes(output: OutputFormat = OutputOption, url: str | None = UrlOption,
          token: str | None = TokenOption) -> None:
    """The logical nodes and what is allocated on them."""
    data = Client(url, token).get("/nodes")

    def table() -> None:
        if data.get("warning"):
            print(f"warning: {data['warning']}", file=sys.stderr)
        print_table(None, ["NODE", "CPUS", "CORES", "RESERVED", "ALLOCATABLE", "ALLOCATED",
                           "MEMORY MiB", "RESERVED MiB", "ALLOCATABLE MiB", "ALLOCATED MiB"], [
            (n["name"], n["cpus"], f"{n['cores']:g}", f"{_reserved(n, 'cpu'):g}",
             f"{_allocatable(n, 'cpu', n['cores']):g}", f"{n['allocated']['cpu']:.3g}",
             mib(n["memory"]), mib(_reserved(n, "memory")),
             mib(_allocatable(n, "memory", n["memory"])), mib(n["allocated"]["memory"])) for n in data["items"]])
        if data.get("backend"):
            print(f"backend: {data['backend']}")
        m = data.get("machine")
        if m:
            cap, res, alloc = m["capacity"], m["reserved"], m["allocatable"]
            print(f"machine: {cap['cpu']:g} cores, {cap['memory']:.0f} MiB; reserved for merkat "
                  f"and the system: {res['cpu']:g} cores, {res['memory']:.0f} MiB; the VMs "
                  f"together: at most {alloc['cpu']:g} cores, {alloc['memory']:.0f} MiB")

    emit(output, data, table)


def _reserved(node: dict[str, Any], r: str) -> float:
    return float((node.get("reserved") or {}).get(r, 0.0))


def _allocatable(node: dict[str, Any], r: str, default: float) -> float:
    return float((node.get("allocatable") or {}).get(r, default))


# --- accounts ----------------------------------------------------------------------------------


@account_app.command("balance")
def account_balance(name: str, output: OutputFormat = OutputOption, url: str | None = UrlOption,
                    token: str | None = TokenOption) -> None:
    """The balance of one of your accounts (``alice``, ``app:PLATFORM``)."""
    a = Client(url, token).get(f"/accounts/{_q(name)}")
    emit(output, a, lambda: print(f"{a['name']}: {a['balance']}"))


@account_app.command("list")
def account_list(output: OutputFormat = OutputOption, url: str | None = UrlOption,
                 token: str | None = TokenOption) -> None:
    """Your accounts and your platforms' (an admin's: all)."""
    data = Client(url, token).get("/accounts")
    emit(output, data, lambda: print_table(None, ["ACCOUNT", "BALANCE"], [
        (a["name"], a["balance"]) for a in data["items"]]))


@account_app.command("history")
def account_history(name: str, limit: int = typer.Option(20, "--limit", min=1, max=10_000),
                    output: OutputFormat = OutputOption, url: str | None = UrlOption,
                    token: str | None = TokenOption) -> None:
    """The last transfers of an account."""
    data = Client(url, token).get(f"/accounts/{_q(name)}/history", limit=limit)
    emit(output, data, lambda: print_table(None, ["ID", "KIND", "FROM", "TO", "AMOUNT", "REASON",
                                                  "PERIOD"], [
        (t["id"], t["kind"], t["from"], t["to"], t["amount"], t["reason"], t["period"])
        for t in data["items"]]))


@account_app.command("transfer")
def account_transfer(source: str, to: str, amount: str,
                     reason: str = typer.Option("transfer", "--reason"),
                     key: str | None = typer.Option(None, "--idempotency-key"),
                     output: OutputFormat = OutputOption, url: str | None = UrlOption,
                     token: str | None = TokenOption) -> None:
    """Move AMOUNT credits from your account SOURCE to account TO."""
    t = Client(url, token).post("/transfers", {"from": source, "to": to, "amount": amount,
                                               "reason": reason, "idempotency_key": key})
    emit(output, t, lambda: print(f"transfer {t['id']}: {t['amount']} {t['from']} -> {t['to']}"))


def mib(v: float | None) -> str | None:
    """MiB as people read them: ``24,110`` or ``0.5``, never ``2.411e+04``."""
    if v is None:
        return None
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.3g}"


def _time(t: float | None) -> str | None:
    """A period's time of day (local); ``-`` for one no clock prints (NaN, 1e300...)."""
    return time_text(t)


__all__ = ["account_app", "nodes", "platform_app", "prices", "print_json", "submit"]
