"""``merkat platform list|show|delete`` and ``merkat events``: the status views of the live
service (docs/service.md, "Status"), over its REST API (:class:`merkat.cli.client.Client`).

``platform list`` answers "did it meet its deadline, and what did it cost" (outcome, deadline,
paid, refunded); ``platform show`` the SLO per cluster (progress, rate achieved vs needed) and
the VMs, or, for an ended platform, its outcome and totals; ``events`` the latest events
(``--limit``, ``--since``, ``--platform``), ``--follow`` printing new ones in the same columns.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import typer

from merkat.cli._common import (
    OutputFormat,
    OutputOption,
    emit,
    fail,
    print_json,
    print_table,
    printable,
)
from merkat.cli.api import Client, TokenOption, UrlOption, platform_path
from merkat.cli.client import platform_app
from merkat.outputs import seconds_text, time_text


def clock(t: float | None) -> str | None:
    """A time of day (local); None for none, ``-`` for one no clock prints (a deadline stored
    as ``1e300``, NaN, a negative time: :func:`~merkat.outputs.time_text`)."""
    return time_text(t)


def _when(delta: float, ended: bool) -> str:
    """How far a deadline is from now (``in N s``, ``N s ago``) or from the end of an ended
    platform (``N s after it ended``); ``>100 years`` beyond, ``-`` when not a number."""
    if math.isnan(delta):
        return "-"
    span = seconds_text(abs(delta))
    if ended:
        return f"{span} {'after' if delta >= 0 else 'before'} it ended"
    return f"in {span}" if delta >= 0 else f"{span} ago"


def credits(v: float | None) -> str | None:
    return None if v is None else f"{v:.6g}"


def _rate(v: float | None) -> str | None:
    if v is None:
        return None
    return f"{v:.3g}/s"


def _progress(c: dict[str, Any]) -> str | None:
    if c.get("work_total"):
        return f"{c['work_done']:g}/{c['work_total']:g} ({100 * (c['progress'] or 0):.0f}%)"
    return None if c.get("work_done") is None else f"{c['work_done']:g}"


def _yes(v: bool | None) -> str | None:
    return None if v is None else ("yes" if v else "no")


@platform_app.command("list")
def platform_list(output: OutputFormat = OutputOption, url: str | None = UrlOption,
                  token: str | None = TokenOption) -> None:
    """Your platforms (an admin's: all): state, outcome (met, missed by N s, stopped, failed:
    reason, running: on track / at risk), deadline, and what each paid and got refunded."""
    data = Client(url, token).get("/platforms")
    emit(output, data, lambda: print_table(None, [
        "NAME", "STATE", "OUTCOME", "DEADLINE", "PAID", "REFUNDED", "OWNER"], [
        (p["name"], p["state"], p.get("outcome"), clock(p.get("deadline")),
         credits(p.get("paid")), credits(p.get("refunded")), p["owner"])
        for p in data["items"]]))


@platform_app.command("show")
def platform_show(name: str, output: OutputFormat = OutputOption, url: str | None = UrlOption,
                  token: str | None = TokenOption) -> None:
    """One platform: its outcome, deadline and money; per cluster the SLO progress and the
    rate achieved against the rate the deadline needs; its VMs (node, bid, allocation,
    cgroup). An ended platform shows its outcome and totals instead of its (gone) VMs."""
    p = Client(url, token).get(platform_path(name))
    emit(output, p, lambda: print_show(p))


def print_show(p: dict[str, Any]) -> None:
    """``platform show``'s tables for the API's platform ``p``."""
    ended = p["state"] in ("finished", "stopped", "failed")
    policy = (p.get("template") or {}).get("controller", {}).get("policy")
    print(printable(f"platform {p['name']} (owner {p['owner']}, {policy}): "
                    f"{p.get('outcome')}", one_line=True))
    deadline = p.get("deadline")
    times = [f"submitted {clock(p['submitted'])}"]
    if p.get("started"):
        times.append(f"started {clock(p['started'])}")
    if p.get("ended"):
        ran = p["ended"] - (p.get("started") or p["submitted"])
        times.append(f"ended {clock(p['ended'])} ({seconds_text(ran)})")
    if deadline is not None:
        ref = p.get("ended") or time.time()
        times.append(f"deadline {clock(deadline)} ({_when(deadline - ref, ended)})")
    else:
        times.append("no deadline (best effort)")
    print("  " + "; ".join(times))
    if p.get("reason") and p["reason"] != p["state"]:
        print(printable(f"  reason: {p['reason']}", one_line=True))
    print(f"  money: budget {credits(p.get('budget'))}, paid {credits(p.get('paid'))}, "
          f"refunded {credits(p.get('refunded'))}, returned {credits(p.get('returned'))} "
          f"(account {p.get('account')})")
    clusters = p.get("clusters") or []
    if clusters:
        print_table(None, ["CLUSTER", "VMS", "MONITOR", "PROGRESS", "RATE", "NEEDED",
                           "ON TRACK"], [
            (c["name"], c["vms"], c["monitor"], _progress(c), _rate(c["rate"]),
             _rate(c["rate_needed"]), _yes(c["on_track"])) for c in clusters])
    if ended:
        return
    if any(v.get("pod") for v in p["vms"]):  # kubernetes: the pod's spec and what it holds
        print_table(None, ["VM", "NODE", "STATE", "BID CPU", "BID MEM", "CPU", "MEM MiB",
                           "POD", "REQ CPU", "REQ MiB", "APPLIED CPU", "APPLIED MiB",
                           "RESIZE", "PID"], [
            (v["id"], v["node"], v["state"], v["bid"]["cpu"], v["bid"]["memory"],
             v["allocation"]["cpu"], v["allocation"]["memory"], v.get("pod"),
             *_pair(v.get("requested")), *_pair(v.get("applied")), v.get("resize"), _pid(v))
            for v in p["vms"]])
        if (p.get("suspension") or {}).get("note"):
            print(f"  suspension: {p['suspension']['note']}")
        for v in p["vms"]:  # under notice (merkat.io/preempt-at): its pod still runs
            if v.get("preempt_at"):
                print(f"  notice: {v['id']}'s pod stops at {v['preempt_at']} (merkat.io/preempt-at)")
        return
    print_table(None, ["VM", "NODE", "STATE", "BID CPU", "BID MEM", "CPU", "MEM MiB",
                       "CGROUP", "PID"], [
        (v["id"], v["node"], v["state"], v["bid"]["cpu"], v["bid"]["memory"],
         v["allocation"]["cpu"], v["allocation"]["memory"], v["cgroup"], _pid(v))
        for v in p["vms"]])


def _pair(size: dict[str, Any] | None) -> tuple[Any, Any]:
    """``(cpu, MiB)`` of a pod's requested or applied size (``None`` when not known yet)."""
    size = size or {}
    mem = size.get("memory")
    return size.get("cpu"), None if mem is None else round(mem)


def _pid(vm: dict[str, Any]) -> str | None:
    """A VM's pid, marked when a restarted server re-adopted it (docs/service.md); a pod
    (kubernetes backend: no pid) re-adopted shows ``(adopted)`` alone."""
    pid, mark = vm.get("pid"), " (adopted)" if vm.get("adopted") else ""
    return (mark.strip() or None) if pid is None else f"{pid}{mark}"


@platform_app.command("delete")
def platform_delete(name: str, output: OutputFormat = OutputOption,
                    url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """Remove an ended platform's record (its logs and working directories too; its bank
    account and history stay), so that NAME can be submitted again. Refused while it runs:
    stop it first."""
    d = Client(url, token).request("DELETE", platform_path(name))
    emit(output, d, lambda: print(f"platform {d['name']} deleted (it had {d['state']}; "
                                  f"account {d['account']} kept)"))


# --- events ------------------------------------------------------------------------------


def _line(e: dict[str, Any]) -> str:
    """One event, on one line: what a user wrote in it (a file name in an error) cannot
    print a second line or drive the terminal (``printable``)."""
    return printable(f"{e['id']:>6}  {clock(e['time'])}  {e['kind']:<16} "
                     f"{e['platform'] or '-':<20} {e['message']}", one_line=True)


HEADER = f"{'ID':>6}  {'TIME':<8}  {'KIND':<16} {'PLATFORM':<20} MESSAGE"


def events(
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=1000,
                              help="How many of the latest events."),
    since: str | None = typer.Option(
        None, "--since", help="Only events from this time on: 10m, 2h, 1d ago, Unix seconds "
        "or an ISO date-time."),
    platform: str | None = typer.Option(None, "--platform", "-p", help="One platform's only."),
    follow: bool = typer.Option(False, "--follow", "-f",
                                help="Then print new events as they come (Ctrl-C stops)."),
    after: int | None = typer.Option(None, "--after", min=0, max=2**63 - 1,
                                     help="The events after this id (oldest first) instead "
                                     "of the latest."),
    output: OutputFormat = OutputOption, url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """The latest events (yours; an admin's: all), oldest first: submissions, state changes,
    charges, VM starts, failures and restarts, money returned. --follow keeps printing new
    ones in the same columns (-o json: one object a line)."""
    from merkat.cli.timespec import parse_time

    t0 = None
    if since is not None:
        try:
            t0 = parse_time(since, "--since")
        except ValueError as exc:
            fail(str(exc))
    c = Client(url, token)
    if after is None:
        data = c.get("/events", tail=limit, since=t0, platform=platform)
    else:
        data = c.get("/events", after=after, limit=limit, since=t0, platform=platform)
    items = data["items"]
    if output is OutputFormat.json and not follow:
        print_json({"items": items})
        return
    if output is OutputFormat.json:
        for e in items:
            print(json.dumps(e))
    else:
        print(HEADER)
        for e in items:
            print(_line(e))
    sys.stdout.flush()
    if not follow:
        return
    last = items[-1]["id"] if items else data.get("next", 0)
    try:
        while True:
            time.sleep(1.0)
            for e in c.get("/events", after=last, limit=1000, platform=platform)["items"]:
                last = e["id"]
                print(json.dumps(e) if output is OutputFormat.json else _line(e), flush=True)
    except KeyboardInterrupt:
        return


__all__ = ["events", "platform_app", "print_show"]
