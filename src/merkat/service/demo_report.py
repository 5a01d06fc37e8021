"""The demo's final report (:mod:`merkat.service.demo`): what the market did.

:func:`collect` reads the facts from what the demo saw each period
(:class:`~merkat.service.demo.Trace`), the platform's records and the bank's journal — never
from the demo's intentions — and :func:`render` prints them:

- each deadline platform: met or missed and by how much (its finish is its solver's last log
  line, i.e. the log file's modification time; the platform's end is only noticed at the
  next period), and how its bid moved (raises of more than 1 %, first and highest bid, a
  sparkline); the CPU its VMs really received (its iterations are CPU seconds) against the
  share the market allocated, and the machine's load when other work took the difference;
- the CPU price over time (sparkline; lowest and highest, as multiples of the reserve price);
- each price-limited platform's suspensions and resumes, with the price at that period;
- the money per platform, from the journal of its account and of its hold account (charged
  by use): ``budget`` (moved in from its owner: the initial budget, renewals, boosts),
  ``paid`` (to the provider), ``refunded`` (back from its hold: the part of its bids it did
  not use), ``returned`` (back to its owner when it ended), ``left`` (still on its accounts);
  the owner's balance before and after;
- the bank's audit, and the path of the run's HTML report (``merkat report``).

It ends with the verdicts: ``deadline NAME met`` (or ``MISSED``), the money summary and
``bank audit: OK``.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BARS = "▁▂▃▄▅▆▇█"
MONEY = ("budget", "paid", "refunded", "returned", "left")


def sparkline(values: list[float]) -> str:
    """One character per value, on a log scale between the smallest and the largest positive
    value (``·`` for zero)."""
    pos = [v for v in values if v > 0]
    if not pos:
        return "·" * len(values)
    lo, hi = math.log(min(pos)), math.log(max(pos))
    return "".join("·" if v <= 0 else BARS[0 if hi == lo else round(
        (math.log(v) - lo) / (hi - lo) * (len(BARS) - 1))] for v in values)


@dataclass
class PlatformFacts:
    """What one platform did (module doc); money in micro-credits."""

    name: str
    count: int
    role: str
    state: str
    reason: str
    deadline_s: float | None = None
    finished_s: float | None = None  # after its submission
    met: bool | None = None  # None without a deadline
    progress: float | None = None  # the fraction of its work done when last seen
    bids: list[float] = field(default_factory=list)  # per VM, each period it ran
    shares: list[float] = field(default_factory=list)
    raises: int = 0
    cpu_received: float | None = None  # cores its VMs burnt on average while running
    cpu_allocated: float | None = None  # cores the market gave them on average meanwhile
    max_price: float | None = None
    suspensions: int = 0
    resumes: int = 0
    changes: list[str] = field(default_factory=list)  # "suspended at 33 s (price …)"
    money: dict[str, int] = field(default_factory=dict)


@dataclass
class Facts:
    """Everything the report says (module doc)."""

    platforms: list[PlatformFacts]
    prices: list[float]
    reserve: float
    capacity: float
    owner: str
    owner_start: int
    owner_now: int
    audit_ok: bool
    minted: int
    balances: int
    html: Path | None
    html_note: str
    load: float | None = None  # the 1-min load average before the demo's VMs started
    vms: int = 0  # the demo's own VMs
    enforced: bool = True  # whether the backend enforced the allocations (cgroups)

    @property
    def ok(self) -> bool:
        """Every deadline met and the books balanced: the demo's exit status 0."""
        return self.audit_ok and all(p.met is not False for p in self.platforms)

    def total(self, key: str) -> int:
        return sum(p.money.get(key, 0) for p in self.platforms)


def finish_time(data: Path, name: str, app: Any) -> float | None:
    """When platform ``name`` finished its work: the last write to its VMs' logs, at most its
    recorded end (None when it did not finish)."""
    if str(app.status) != "finished":
        return None
    last = max((f.stat().st_mtime for f in (data / "logs" / name).glob("*.log")), default=None)
    end: float | None = app.end_time
    if last is None or end is None:
        return end
    return min(last, end)


def money(ledger: Any, account: str, owner: str, provider: str) -> dict[str, int]:
    """Micro-credits of one platform's accounts, by counterpart (module doc)."""
    hold = f"{account}:hold"
    names = [account] + ([hold] if ledger.has_account(hold) else [])
    journal = {t.id: t for n in names for t in ledger.history(n)}
    out = dict.fromkeys(MONEY, 0)
    for t in journal.values():
        if t.payee == account and t.payer == owner:
            out["budget"] += t.amount
        elif t.payee == provider and t.payer in names:
            out["paid"] += t.amount
        elif t.payer == hold and t.payee == account:
            out["refunded"] += t.amount
        elif t.payer in names and t.payee == owner:
            out["returned"] += t.amount
    out["left"] = sum(ledger.balance(n) for n in names)
    return out


def state_changes(when: list[float], prices: list[float], states: list[str | None],
                  reserve: float) -> list[str]:
    """Each suspension and resume of a platform, with the CPU price its controller saw.

    ``states[k]`` is the platform's state sampled at ``when[k]``, after a period whose
    clearing gave ``prices[k]``. A controller decides on the price of the clearing before its
    own period, so a change first seen at sample k was decided on ``prices[k - 1]``: the
    price at sample k already lacks (or includes) the application's own bid, which is why a
    limit-10x application could seem to suspend "at 9.5x" when the price it saw was above 10x.
    """
    out: list[str] = []
    last: str | None = None
    for k, (w, state) in enumerate(zip(when, states, strict=False)):
        seen = prices[k - 1] if 0 < k <= len(prices) else None
        at = "" if seen is None else f" (price seen {seen:.4f} = {seen / reserve:.1f}x)"
        if last == "running" and state == "suspended":
            out.append(f"suspended at {w:.0f} s{at}")
        elif last == "suspended" and state == "running":
            out.append(f"resumed at {w:.0f} s{at}")
        last = state or last
    return out


def collect(svc: Any, entries: list[Any], trace: Any, data: Path, owner: str,
            owner_start: int) -> Facts:
    """The facts of a finished demo run (module doc), but for the HTML report (written
    once the server has stopped, by the writer the caller hands to
    :func:`merkat.service.demo.run`)."""
    with svc.manager.lock:
        apps = dict(svc.manager.platform.apps)
    ledger, r = svc.store.ledger, trace.reserve
    when = [t - trace.start for t in trace.times]
    out = []
    for e in entries:
        app = apps.get(e.name)
        rows = trace.samples.get(e.name, [])
        if app is None:
            out.append(PlatformFacts(e.name, e.count, e.role, "never admitted", "",
                                     e.deadline_s, met=False if e.deadline_s else None))
            continue
        p = PlatformFacts(e.name, e.count, e.role, str(app.status), app.reason, e.deadline_s,
                          max_price=e.max_price, suspensions=app.suspensions,
                          resumes=app.resumes)
        run = [s for s in rows if s is not None and s.state == "running"]
        p.bids, p.shares = [s.bid for s in run], [s.share for s in run]
        p.raises = sum(1 for a, b in itertools.pairwise(p.bids) if b > 1.01 * a)
        p.changes = state_changes(when, trace.prices,
                                  [s.state if s is not None else None for s in rows], r)
        timed = [(w, s) for w, s in zip(when, rows, strict=False)
                 if s is not None and s.state == "running" and s.done is not None]
        if e.deadline_s is not None and len(timed) >= 2 and timed[-1][0] > timed[0][0]:
            (w0, s0), (w1, s1) = timed[0], timed[-1]
            assert s0.done is not None and s1.done is not None
            # the solver's iterations are CPU seconds: what its VMs really got
            p.cpu_received = (s1.done - s0.done) * e.cost * e.count / (w1 - w0)
            p.cpu_allocated = sum(s.share for _, s in timed[:-1]) / (len(timed) - 1)
        seen = [s for s in rows if s is not None and s.done is not None and s.total]
        if seen:
            last = seen[-1]
            assert last.done is not None and last.total
            p.progress = min(1.0, last.done / last.total)
        if e.deadline_s is not None:
            done = finish_time(data, e.name, app)
            p.finished_s = None if done is None else done - app.spec.submit_time
            p.met = p.finished_s is not None and p.finished_s <= e.deadline_s
        p.money = money(ledger, app.account, owner, svc.config.provider)
        out.append(p)
    audit = ledger.audit()
    return Facts(out, list(trace.prices), r, trace.capacity, owner, owner_start,
                 ledger.balance(owner), audit.ok, audit.minted, audit.sum_of_balances, None,
                 "not written", trace.load_before, trace.vms,
                 bool(getattr(svc.backend, "enforced", True)))


def _c(micro: int) -> str:
    return f"{micro / 1e6:.4f}".rstrip("0").rstrip(".") if micro else "0"


def verdict(p: PlatformFacts) -> str:
    """``deadline NAME met: …`` or ``deadline NAME MISSED (…)``."""
    assert p.deadline_s is not None
    if p.met:
        assert p.finished_s is not None
        return (f"deadline {p.name} met: finished {p.finished_s:.0f} s after submission, "
                f"{p.deadline_s - p.finished_s:.0f} s before its deadline of {p.deadline_s:g} s")
    how = (f"finished {p.finished_s - p.deadline_s:.0f} s late" if p.finished_s is not None
           else p.reason if p.reason.startswith(p.state)
           else f"{p.state}: {p.reason or 'not finished'}")
    if p.finished_s is None and p.progress is not None:
        how += f", {100 * p.progress:.0f} % of its work done"

    return f"deadline {p.name} MISSED ({how}; deadline {p.deadline_s:g} s)"


def render(f: Facts) -> str:
    """The report's text (module doc)."""
    r = f.reserve
    lines = ["", "== what the market did =="]
    for p in f.platforms:
        head = f"{p.name} ({p.count} VMs, {p.role})"
        if p.deadline_s is not None:
            lines.append(f"{head}: {verdict(p).split(' ', 2)[2]}")
            if p.bids:
                top = max(p.bids)
                lines.append(f"  bid per VM raised {p.raises} times: {p.bids[0]:.4g} at start, "
                             f"highest {top:.4g} ({top / p.bids[0]:.0f}x); share up to "
                             f"{max(p.shares):.2f} of {f.capacity:g} cores")
                lines.append(f"  bid   {sparkline(p.bids)}  (each period it ran, log scale)")
            if p.cpu_received is not None and p.cpu_allocated is not None:
                busy = "" if p.cpu_received >= 0.7 * p.cpu_allocated else (
                    " (allocations not enforced: no writable cgroups; run as root)"
                    if not f.enforced else
                    f" (the machine was busy with other work: load average {f.load:.1f} "
                    f"on {os.cpu_count()} CPUs before the demo's {f.vms} VMs started)"
                    if f.load is not None else "")
                lines.append(f"  CPU received {p.cpu_received:.2f} cores on average, of "
                             f"{p.cpu_allocated:.2f} allocated{busy}")
        elif p.max_price is not None:
            head = f"{p.name} ({p.count} VMs, {p.role} = {p.max_price / r:.0f}x the reserve)"
            lines.append(f"{head}: {p.suspensions} suspension(s), {p.resumes} resume(s)"
                         + (": " + ", ".join(p.changes) if p.changes else ""))
        else:
            lines.append(f"{head}: {p.state}" + (f" ({p.reason})" if p.reason else ""))
    if any(p > 0 for p in f.prices):
        top, low = max(f.prices), min(p for p in f.prices if p > 0)
        lines.append(f"cpu price: lowest {low:.4f}, highest {top:.4f} = "
                     f"{top / r:.0f}x the reserve price {r:g} (credits per core per period)")
        lines.append(f"  price {sparkline(f.prices)}  ({len(f.prices)} periods, log scale)")
    lines.append("money (credits):  platform   " + "".join(f"{k:>10s}" for k in MONEY))
    for p in f.platforms:
        lines.append(f"                  {p.name:10s} "
                     + "".join(f"{_c(p.money.get(k, 0)):>10s}" for k in MONEY))
    lines.append(f"HTML report: {f.html}  ({f.html_note})" if f.html
                 else f"HTML report: {f.html_note}")
    lines.extend(verdict(p) for p in f.platforms if p.deadline_s is not None)
    lines.append(f"money: budgets {_c(f.total('budget'))}, paid {_c(f.total('paid'))}, refunded "
                 f"{_c(f.total('refunded'))}, returned {_c(f.total('returned'))}, left on the "
                 f"platforms' accounts {_c(f.total('left'))}; user {f.owner}: "
                 f"{_c(f.owner_start)} before, {_c(f.owner_now)} after")
    lines.append(f"bank audit: {'OK' if f.audit_ok else 'FAILED'} (minted {_c(f.minted)}, "
                 f"balances {_c(f.balances)})")
    return "\n".join(lines)
