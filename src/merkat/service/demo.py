"""The embedded demo (``merkat demo``, ``make run``): the live market under more demand than
this machine can serve, and what it did about it.

It starts the real server (API on a loopback port, period loop, local backend with cgroups
when root), creates the user ``demo`` and submits through the API, all at once
(:func:`scenario`, scaled to the machine's allocatable CPU ``C`` and to the run's length):

- ``urgent`` — a ``vertical-deadline`` solver of ``n = max(2, ceil(C))`` VMs whose work
  needs 30 % of the machine until its deadline: at an equal share (C/7n per VM) it would take
  2.1 times as long, so its controller raises its bid until the market gives it that share;
- ``batch`` — a best-effort solver of ``5n`` VMs that would take the whole machine for ever
  (it starts asking for 5 % of each VM: 25 % of 5n VMs is more than the machine, an infinite
  bid, and it would never start);
- ``thrifty`` — a best-effort solver of ``n`` VMs with a price limit (``max_price``): it is
  suspended when the CPU price climbs above it and resumed when it falls.

The server charges by use (``charging: use``): each VM deposits its bid and pays for the CPU
its cgroup measured, the rest is refunded.

Every period it prints one line (the CPU price and its multiple of the reserve price; per
platform its state, per-VM CPU bid, CPU share in cores and progress). After ``duration``
seconds it stops what still runs (as its owner would with ``merkat platform stop``), waits
for the period that records their end (their budgets go home then), and prints the report (:mod:`merkat.service.demo_report`): each deadline met
or missed and by how much, the deadline's bid and the price over time as sparklines, the
suspensions and resumes, the money (budgets, paid, refunded, returned) and the bank's audit,
and the path of the run's HTML report (``merkat report``). Then it stops the server and
destroys its VMs. Exit 0 when every deadline was met and the books balance, 1 otherwise.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from merkat.service.demo_report import Facts

DEMO_BUDGET = 2000
OWNER = "demo"
COST = 0.25  # CPU seconds per solver iteration
LONG = 100_000  # iterations of a solver that never ends within the demo
ENDED = ("finished", "stopped", "failed")

SOLVER = """\
name: {name}
controller: {{policy: {policy}{reference}, params: {params}}}
budget: {budget}
trade: [cpu]
clusters:
  - name: solver
    command: exec "$MERKAT_PYTHON" -m merkat.examples.solver --iterations {iterations} --cost {cost}
    count: {count}
    cpu: 1
    memory: 96
    min_memory: 48
    monitor:
      kind: log
      regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'
"""


@dataclass(frozen=True)
class Entry:
    """One platform of the scenario: its template and what the report says of it."""

    name: str
    template: str
    count: int
    deadline_s: float | None = None  # seconds after submission
    max_price: float | None = None
    role: str = ""
    cost: float = COST  # CPU seconds per iteration of its solver


@dataclass
class Sample:
    """One platform in one period: state, per-VM CPU bid, CPU share (cores), progress."""

    state: str
    bid: float
    share: float
    done: float | None
    total: float | None


@dataclass
class Trace:
    """What the demo saw, period by period (the report's input)."""

    start: float
    reserve: float
    capacity: float
    times: list[float] = field(default_factory=list)
    prices: list[float] = field(default_factory=list)
    load_before: float | None = None  # the machine's 1-min load average before the VMs
    vms: int = 0  # the demo's own VMs (each a CPU-bound process: the load they add)
    samples: dict[str, list[Sample | None]] = field(default_factory=dict)


def scenario(duration: float, capacity: float, reserve: float) -> list[Entry]:
    """The demo's platforms for a run of ``duration`` seconds on ``capacity`` allocatable
    cores with the reserve price ``reserve`` (module doc).

    ``n = max(2, ceil(C))`` urgent VMs, ``5n`` batch VMs, ``n`` thrifty VMs. The urgent
    solver's work is 30 % of the machine until ``R = 0.45·duration`` seconds (each VM
    ``0.3·C·R/n`` CPU-seconds), against an equal share of 1/7 (``C/7n`` per VM): at an equal
    share it would take 2.1 times as long. It starts bidding for a tenth of its VMs (the
    reserve). With every VM at the reserve the price is ``7n·reserve/C``; thrifty's limit is
    a tenth above that, so it runs beside batch but not beside an urgent solver that outbids
    them: taking a share S of C from bids B makes the price B/(C − S), 10× the reserve once
    S ≥ C − 0.6n cores against the 6n best-effort VMs (B = 6n·reserve). The need is kept at
    30 % (plus its controller's margin) so that it is met on a machine busy with other work.
    """
    n = max(2, math.ceil(capacity - 1e-9))
    reference = 0.45 * duration
    work = 0.3 * capacity * reference / n  # CPU seconds per urgent VM
    limit = float(f"{1.1 * 7 * n * reserve / capacity:.2g}")

    def solver(name: str, policy: str, count: int, iterations: int, budget: float,
               params: str = "{}", reference: str = "") -> str:
        return SOLVER.format(name=name, policy=policy, reference=reference, params=params,
                             budget=budget, iterations=iterations, cost=COST, count=count)

    return [
        Entry("urgent", solver("urgent", "vertical-deadline", n,
                                 max(4, round(work / COST)), 100,
                                 params="{start_fraction: 0.1}",
                                 reference=f", reference: {reference:.0f}"),
              count=n, deadline_s=round(reference), role="deadline solver"),
        Entry("batch", solver("batch", "best-effort", 5 * n, LONG, 20,
                              params="{start_fraction: 0.05}"), count=5 * n,
              role="best effort"),
        Entry("thrifty", solver("thrifty", "best-effort", n, LONG, 20,
                                params=f"{{max_price: {limit:g}}}"),
              count=n, max_price=limit, role=f"best effort, price limit {limit:g}"),
    ]


def _api(base: str, key: str, method: str, path: str, body: bytes | None = None,
         ctype: str = "application/json") -> Any:
    req = urllib.request.Request(f"{base}/api/v1{path}", data=body, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def sample(svc: Any, name: str) -> Sample | None:
    """Platform ``name`` now (None before it is admitted); call with the manager's lock."""
    app = svc.manager.platform.apps.get(name)
    if app is None:
        return None
    slo = svc.manager.slo(name)
    vms = app.records()
    bid = max((v.bid.get("cpu", 0.0) for v in vms), default=0.0)
    share = sum(v.alloc.get("cpu", 0.0) for v in vms)
    return Sample(str(app.status), bid, share, slo.get("work_done"), slo.get("work_total"))


def line(trace: Trace, entries: list[Entry]) -> str:
    """The last period as one line: time, CPU price (× the reserve), each platform."""
    t, price = max(0.0, trace.times[-1] - trace.start), trace.prices[-1]
    parts = [f"[{t:4.0f}s] price {price:.4f} ({price / trace.reserve:4.1f}x)"]
    for e in entries:
        rows = trace.samples[e.name]
        s = rows[-1]
        if s is None:
            parts.append(f"{e.name} -")
            continue
        if s.state in ("waiting", "finished", "stopped"):
            parts.append(f"{e.name} {s.state}")
            continue
        prev = next((r for r in reversed(rows[:-1]) if r is not None and r.bid > 0), None)
        arrow = " " if prev is None or abs(s.bid - prev.bid) <= 0.01 * prev.bid else \
            ("^" if s.bid > prev.bid else "v")
        prog = f" {100 * s.done / s.total:3.0f}%" if s.total and s.done is not None and \
            s.total < LONG else ""
        if s.state == "suspended":
            parts.append(f"{e.name} SUSPENDED")
        else:
            parts.append(f"{e.name} bid {s.bid:.4f}{arrow} {s.share:4.2f} cores{prog}")
    return " | ".join(parts)


def run(duration: float, period: float, port: int = 0, data_dir: Path | None = None,
        out: Any = None,
        html_report: Callable[[Path], tuple[Path | None, str]] | None = None) -> Facts:
    """Run the demo (module doc), printing each period to ``out``; returns its facts.
    ``html_report(data_dir)`` writes the run's HTML report once the server has stopped and
    returns its path (or None) and the command or the reason (``merkat demo`` hands over
    :func:`merkat.report.live.write_html`; the service does not import the reports)."""
    from merkat.service.config import load_config
    from merkat.service.demo_report import collect
    from merkat.service.server import Service, log

    out = out or sys.stdout
    data = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="merkat-demo-"))
    cfg = load_config(None, port=port, data_dir=data, period=period,
                      admission=min(period, 10.0), charging="use")
    svc = Service(cfg, on_period=lambda rec: None)
    key = svc.store.add_user(OWNER, budget=DEMO_BUDGET * 1_000_000)
    capacity = float(svc.manager.platform.hosts.capacity[:, 0].sum())
    reserve = float(cfg.reserve.get("cpu", 0.001))
    entries = scenario(duration, capacity, reserve)
    trace = Trace(start=time.time(), reserve=reserve, capacity=capacity,
                  samples={e.name: [] for e in entries}, load_before=os.getloadavg()[0],
                  vms=sum(e.count for e in entries))

    def on_period(rec: dict[str, Any]) -> None:
        with svc.manager.lock:
            trace.times.append(rec["time"])
            trace.prices.append(float(rec["prices"].get("cpu", 0.0)))
            for e in entries:
                trace.samples[e.name].append(sample(svc, e.name))
        if any(rows[-1] is not None for rows in trace.samples.values()):
            print(line(trace, entries), file=out, flush=True)

    svc.on_period = on_period
    svc.start_background()
    base = f"http://127.0.0.1:{svc.port}"
    log(svc.banner())
    log(f"demo: user '{OWNER}' (budget {DEMO_BUDGET}); watch from another shell with\n"
        f"  export MERKAT_URL={base} MERKAT_TOKEN={key}\n"
        f"  merkat platform list; merkat platform show urgent; merkat prices --watch; "
        f"merkat events --follow")
    print(f"merkat demo: {capacity:g} allocatable cores, reserve price {reserve:g} per core "
          f"and period; {len(entries)} platforms, {sum(e.count for e in entries)} VMs of 1 "
          f"core, charged by use:", file=out)
    for e in entries:
        due = f", deadline {e.deadline_s:g} s" if e.deadline_s is not None else ""
        print(f"  {e.name}: {e.count} VMs, {e.role}{due}", file=out)
    print(f"each period ({period:g} s): the CPU price (x the reserve); per platform its bid per "
          f"VM (^ raised, v lowered), its share in cores, its progress", file=out, flush=True)
    try:
        trace.start = time.time()
        for e in entries:
            _api(base, key, "POST", "/platforms", e.template.encode(), "application/yaml")
        end = time.monotonic() + duration
        while time.monotonic() < end and not _all_ended(svc):
            time.sleep(0.5)
        _stop_all(svc, period)
        facts = collect(svc, entries, trace, data, OWNER, DEMO_BUDGET * 1_000_000)
    finally:
        svc.shutdown()
        log(f"demo: server stopped, VMs destroyed; state kept in {data}")
    facts.html, facts.html_note = (html_report(data) if html_report is not None
                                   else (None, "not written (no report writer given)"))
    return facts


def run_demo(duration: float, period: float, port: int = 0, data_dir: Path | None = None,
             out: Any = None,
             html_report: Callable[[Path], tuple[Path | None, str]] | None = None) -> int:
    """Run the demo (:func:`run`) and print its report; 0 when every deadline was met and
    the audit is OK, else 1."""
    from merkat.service.demo_report import render

    out = out or sys.stdout
    facts = run(duration, period, port, data_dir, out, html_report)
    print(render(facts), file=out, flush=True)
    return 0 if facts.ok else 1


def _all_ended(svc: Any) -> bool:
    """Whether every submitted platform has ended (read in-process: the demo's own polling
    must not wait on the API it shares the machine with)."""
    rows = svc.store.platforms()
    return bool(rows) and all(r.state in ENDED for r in rows)


def _stop_all(svc: Any, period: float) -> None:
    """Stop every platform still active, as its owner would (``merkat platform stop``), and
    wait (at most two periods) until the period loop has recorded their end, so that what
    happens to their money when they end is in the books."""
    for row in svc.store.platforms():
        if row.state not in ENDED:
            svc.manager.stop(row.name, "stopped at the end of the demo")
    end = time.monotonic() + 2 * period + 1
    while not _all_ended(svc) and time.monotonic() < end:
        time.sleep(0.2)
