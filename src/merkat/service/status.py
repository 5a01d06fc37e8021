"""What a platform's owner asks of it (docs/service.md, "Status"): did it meet its deadline,
is it on track, what did it pay and what came back.

Pure functions over what the store, the bank and the monitors recorded, and
:func:`platform_status`, which gathers them for the API (``GET /platforms`` and
``GET /platforms/{name}``):

- :func:`outcome` — one phrase: ``met``, ``missed by N s``, ``finished`` (no deadline),
  ``stopped`` (by its owner), ``stopped: REASON``, ``missed: stopped (REASON)`` (a deadline
  platform ended unfinished), ``failed: REASON``, ``running: on track``, ``running: at
  risk``, ``running: late by N s``, ``running: no progress yet``, ``running`` (best effort),
  and the same for ``suspended``; ``queued``, ``waiting``.
- :func:`money_of` — from the account's history in the bank: ``budget`` (what the owner moved
  in: the budget, renewals, boosts), ``paid`` (to the provider, net of refunds), ``refunded``
  (the unused part of deposits, charging by use: Tycoon §3) and ``returned`` (what went back
  to the owner when it ended).
- :func:`progress_of` — a monitor's reading against the deadline: progress, the rate achieved
  (work units per second, measured) and the rate needed (work left / time left).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from merkat.bank.policies import hold_account
from merkat.control.types import Metrics
from merkat.service.clusters import platform_metrics, poll_of

if TYPE_CHECKING:
    from merkat.service.context import ManagerState
    from merkat.service.db import PlatformRow

ACTIVE_STATES = ("queued", "waiting", "running", "suspended")
ENDED_STATES = ("finished", "stopped", "failed")
USER_STOP = "stopped by the user"


@dataclass(frozen=True)
class Money:
    """A platform's money in credits (module doc)."""

    budget: float = 0.0
    paid: float = 0.0
    refunded: float = 0.0
    returned: float = 0.0


def flows(ledger: Any, names: list[str]) -> dict[tuple[str, str], int]:
    """The micro-credits moved between each (payer, payee) pair where either is one of
    ``names``: one aggregate query on the SQL ledger (a list of a hundred platforms with
    months of charges reads sums, not every transfer), else from each account's history."""
    out: dict[tuple[str, str], int] = {}
    engine = getattr(ledger, "engine", None)
    if engine is None:
        seen: set[int] = set()
        for name in names:
            if not ledger.has_account(name):
                continue
            for t in ledger.history(name):
                if t.id not in seen and t.payer is not None and t.payee is not None:
                    seen.add(t.id)
                    out[(t.payer, t.payee)] = out.get((t.payer, t.payee), 0) + t.amount
        return out
    from sqlalchemy import func, or_, select
    from sqlalchemy.orm import aliased

    from merkat.bank.schema import accounts, transfers
    from merkat.defaults import MICRO

    payer, payee = aliased(accounts), aliased(accounts)
    amount = transfers.c.amount
    q = (select(payer.c.name, payee.c.name, func.sum(amount // MICRO), func.sum(amount % MICRO))
         .join(payer, payer.c.id == transfers.c.payer_id)
         .join(payee, payee.c.id == transfers.c.payee_id)
         .where(or_(payer.c.name.in_(names), payee.c.name.in_(names)))
         .group_by(payer.c.name, payee.c.name))
    with engine.connect() as conn:
        for a, b, whole, rest in conn.execute(q):
            out[(a, b)] = int(whole) * MICRO + int(rest)
    return out


def money_of(ledger: Any, account: str, owner: str, provider: str,
             moved: dict[tuple[str, str], int] | None = None) -> Money:
    """``account``'s money from the bank (module doc); zeros when it has none. ``moved``:
    :func:`flows` over it and its hold account, when the caller read them for many."""
    hold = hold_account(account)
    if moved is None:
        moved = flows(ledger, [account, hold])

    def m(a: str, b: str) -> int:
        return moved.get((a, b), 0)

    paid = m(account, provider) - m(provider, account) + m(hold, provider)
    return Money(m(owner, account) / 1e6, paid / 1e6, m(hold, account) / 1e6,
                 m(account, owner) / 1e6)


def progress_of(m: Metrics | None, deadline: float | None, now: float) -> dict[str, Any]:
    """A reading against the deadline: ``work_done``, ``work_total``, ``progress`` (0-1, None
    without a total), ``rate`` (measured work units/s), ``rate_needed`` (work left / seconds
    left; None without a deadline or a total, or once the deadline has passed with work left:
    no rate is enough) and ``on_track`` (the measured rate finishes before the deadline).
    Every number is finite (JSON)."""
    out: dict[str, Any] = {"work_done": None, "work_total": None, "progress": None,
                           "rate": None, "rate_needed": None, "on_track": None}
    if m is None:
        return out
    out["rate"] = m.progress_rate
    if not m.work_total:
        if m.work_done:
            out["work_done"] = m.work_done
        return out
    left = max(0.0, m.work_total - m.work_done)
    out.update(work_done=m.work_done, work_total=m.work_total,
               progress=min(1.0, m.work_done / m.work_total))
    if deadline is not None:
        if left <= 0:
            out["rate_needed"], out["on_track"] = 0.0, True
            return out
        if deadline <= now:
            out["on_track"] = False
            return out
        out["rate_needed"] = left / (deadline - now)
        if m.progress_rate:
            out["on_track"] = now + left / m.progress_rate <= deadline
    return out


def outcome(state: str, reason: str, deadline: float | None, ended: float | None,
            now: float, on_track: bool | None) -> str:
    """The platform's outcome in one phrase (module doc)."""
    if state in ("queued", "waiting"):
        return state
    if state in ("running", "suspended"):
        if deadline is None:
            return state
        if now > deadline:
            return f"{state}: late by {now - deadline:.0f} s"
        if on_track is None:
            return f"{state}: no progress yet"
        return f"{state}: {'on track' if on_track else 'at risk'}"
    if state == "finished" or (state == "stopped" and reason == "finished"):
        # (stopped by its controller when its monitor showed all the work done)
        if deadline is None:
            return "finished"
        late = (ended or now) - deadline
        return "met" if late <= 0 else f"missed by {late:.0f} s"
    why = reason if reason and reason != state else ""
    if state == "failed":
        return f"failed: {why}" if why else "failed"
    if why == USER_STOP:
        return "stopped"
    if deadline is not None:
        return f"missed: stopped ({why})" if why else "missed: stopped"
    return f"stopped: {why}" if why else "stopped"


def deadline_of(m: ManagerState, row: PlatformRow) -> float | None:
    """The platform's absolute deadline: its controller's, else the one recorded at admission,
    else (a platform not yet admitted) its submission plus the template's reference."""
    app = m.platform.apps.get(row.name)
    if app is not None and row.state in ACTIVE_STATES:
        return app.spec.deadline
    if row.deadline is not None:
        return row.deadline
    ref = (row.template.get("controller") or {}).get("reference")
    return row.submitted + float(ref) if ref else None


def account_of(m: ManagerState, row: PlatformRow) -> str:
    """The platform's bank account (``app:NAME``, ``app:NAME@2`` for the second platform of
    that name: :mod:`merkat.service.records`)."""
    app = m.platform.apps.get(row.name)
    if app is not None and row.state in ACTIVE_STATES:
        return app.account
    return row.account or f"app:{row.name}"


def platforms_status(m: ManagerState, rows: list[PlatformRow]) -> list[dict[str, Any]]:
    """:func:`platform_status` of many platforms, their money read in one query."""
    accounts = [account_of(m, r) for r in rows]
    moved = flows(m.store.ledger, [n for a in accounts for n in (a, hold_account(a))]) \
        if rows else {}
    return [platform_status(m, r, moved=moved) for r in rows]


def platform_status(m: ManagerState, row: PlatformRow, slo: dict[str, Any] | None = None,
                    moved: dict[tuple[str, str], int] | None = None) -> dict[str, Any]:
    """The status fields of platform ``row`` (``outcome``, ``reason``, ``deadline``,
    ``account`` and the :class:`Money` figures) for the API. ``slo``: its progress
    (:func:`progress_of`) when the caller has it."""
    now = m.clock()
    deadline = deadline_of(m, row)
    on_track = None
    if row.state in ("running", "suspended") and deadline is not None:
        if slo is None:  # read without the manager's lock: a list never waits for a period
            live = m.live.get(row.name)
            slo = progress_of(platform_metrics(live) if live else None, deadline, now)
        on_track = slo.get("on_track")
    account = account_of(m, row)
    money = money_of(m.store.ledger, account, row.owner, m.config.provider, moved)
    return {"outcome": outcome(row.state, row.outcome, deadline, row.ended, now, on_track),
            "reason": row.outcome or None, "deadline": deadline, "account": account,
            **asdict(money)}


def clusters_status(m: ManagerState, row: PlatformRow, deadline: float | None
                    ) -> list[dict[str, Any]]:
    """Per cluster, for ``platform show``: its name, VMs, monitor kind, poll, and its progress
    against the platform's deadline (:func:`progress_of`)."""
    from merkat.service.templates import Template

    try:
        t = Template.model_validate(row.template)
    except ValueError:
        return []
    live = m.live.get(row.name) or m.ended.get(row.name)
    app = m.platform.apps.get(row.name)
    trackers = dict(live.others) if live is not None else {}
    if live is not None:
        trackers[t.monitored.name] = live.tracker
    now = m.clock()
    out = []
    for c in t.ordered():
        vms = 0
        if app is not None:
            vms = sum(1 for vm in app.records() if (i := m.vm_index.get(vm.id)) is not None
                      and t.cluster_of(i)[0].name == c.name)
        tracker = trackers.get(c.name)
        reading = tracker.metrics() if tracker is not None and tracker.values else None
        kind = c.monitor.kind if c.monitor else (
            "command" if c.name == t.monitored.name and t.commands.monitor else None)
        out.append({"name": c.name, "vms": vms, "monitor": kind,
                    "poll": poll_of(t, c.name) if kind else None,
                    **progress_of(reading, deadline, now)})
    return out
