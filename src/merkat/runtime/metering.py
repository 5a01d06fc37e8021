"""Charging by measured use (Tycoon §3, live): deposit the bids, pay what was used, refund
the rest.

The simulator's ``use`` charging knows at once what each VM uses (its allocation × the
clearing's price). A live backend only knows it after the period: each VM's cgroup counts the
CPU its processes used (``LocalBackend.cpu_used(app)``: core-seconds since the last reading,
:mod:`merkat.backends.local.metering`). So, with ``Economy(metered=True)``:

1. at each period the driver reads every active application's measured CPU (before the
   decision) and the economy first **settles** the deposit each application made the period
   before: it pays ``used core-seconds / period × that period's CPU price`` plus its memory
   allocation × that period's memory price (memory is held, not measured), at most the
   deposit; the rest of the deposit is refunded to its account (:class:`ChargeByUse.settle
   <merkat.bank.policies.ChargeByUse.settle>`, one transaction);
2. then each application **deposits** this period's bids into its hold account
   (``app:NAME:hold``); one that cannot is unpaid and its VMs do not run, as with ``bid``.

An admission between periods deposits its prorated bids; they are settled at the next
period with what was used since. Without a measurement (``cpu_used`` returns None: cgroups not
writable) an application pays its modelled use (allocation × price), as in the simulator.
A deposit still open when an application ends is settled by the end rule before its money
goes home (the driver's end rule, :meth:`merkat.runtime.driver.Driver.close_ended`). A deposit made before a server restart
is not remembered: the first settlement after it refunds it whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from merkat.bank.ledger import Ledger
from merkat.bank.policies import ChargeByUse
from merkat.core.model import Charged, Decision
from merkat.defaults import MICRO


@runtime_checkable
class Metered(Protocol):
    """A backend that measures what each application used (charging by use)."""

    def cpu_used(self, app: str) -> float | None:
        """CPU core-seconds ``app``'s VMs used since the last call; None when not measured."""
        ...


@dataclass(frozen=True)
class Deposit:
    """One application's open deposit: its account, the CPU price of the period it paid for
    (credits per core per period), its memory allocation's cost then (micro-credits), its
    modelled use (micro-credits, when nothing is measured) and the period's length (s)."""

    account: str
    cpu_price: float
    memory_cost: int
    modelled: int
    period: float


def measured_cost(deposit: Deposit, used: float | None) -> int:
    """What ``deposit``'s application owes for ``used`` core-seconds (None: its modelled use)."""
    if used is None:
        return deposit.modelled
    return round(max(0.0, used) * deposit.cpu_price / deposit.period * MICRO) + \
        deposit.memory_cost


@dataclass
class MeteredUse:
    """The deposits of charging by measured use (module doc), for the ``provider``."""

    provider: str
    pending: dict[str, Deposit] = field(default_factory=dict)  # application id -> deposit

    def settle(self, ledger: Ledger, period: int, measured: Mapping[str, float | None],
               tag: str = "", only: Sequence[str] | None = None) -> dict[str, int]:
        """Settle the open deposits (of the applications ``only``, else all): each pays
        :func:`measured_cost` of its ``measured`` CPU, at most its deposit, the rest
        refunded. Returns ``{application id: paid}``."""
        due = {a: d for a, d in self.pending.items() if only is None or a in only}
        if not due:
            return {}
        usage = {d.account: measured_cost(d, measured.get(a)) for a, d in due.items()}
        result = ChargeByUse(self.provider).settle(ledger, period, usage, tag)
        for a in due:
            del self.pending[a]
        return {a: result.charged.get(d.account, 0) for a, d in due.items()}

    def charge(self, ledger: Ledger, decision: Decision, accounts: Mapping[str, str],
               measured: Mapping[str, float | None] | None, tag: str) -> Charged:
        """A period's (``measured`` given: settle, then deposit) or an admission's
        (``measured`` None: deposit only) charge of ``decision`` (``accounts``: application
        id -> account)."""
        paid = self.settle(ledger, decision.index, measured, tag) if measured is not None \
            else {}
        ids = [a for a, _ in decision.bills]
        bills = [(accounts[a], x) for a, x in decision.bills]
        unpaid: frozenset[str] = frozenset()
        if bills:
            held = ChargeByUse(self.provider).reserve(ledger, decision.index, bills, tag)
            unpaid = frozenset(ids[k] for k in held.unpaid)
            usage = dict(decision.usage)
            prices = decision.prices
            memory: dict[str, float] = {}
            for vm, alloc in decision.plan.allocations.items():
                app = vm.split("/", 1)[0]
                memory[app] = memory.get(app, 0.0) + alloc.get("memory", 0.0)
            for k in held.paid:
                a = ids[k]
                self.pending[a] = Deposit(
                    bills[k][0], prices.get("cpu", 0.0),
                    round(memory.get(a, 0.0) * prices.get("memory", 0.0) * MICRO),
                    usage.get(a, 0), decision.plan.period)
        return Charged(paid, unpaid, sum(paid.values()))
