"""The economy: who holds the money and how it moves (the driver's ledger effects).

Users hold the money (Merkat §4.1.3). When an application is admitted its **initial budget is
minted into its owner's account** (``initial budget``, once per application) and moved to the
application's account by the credit manager. Every period each application's renewal
(``Allowance``: its rate, never lifting its balance above its cap, Themis §III-A) moves from
its owner's account to it, never more than the owner holds. Two economies, by name
(:data:`ECONOMIES`):

- ``themis`` — the owner first receives, as a logged mint (``allowance``), exactly what her
  applications' renewals need this period: the papers' renewal rate, money enters every period;
- ``closed`` — no money enters after the initial budgets: the provider's income returns to the
  users through the Virtual Bank every ``redistribute_every`` (K) periods, in equal parts
  (grid-cloud model §3.1), with an optional idle tax on user balances (``idle_tax_ppm``).

Charging, by name (:data:`CHARGING`, plugins of the :class:`Charging` interface; the economies
are :class:`MoneyRules` plugins of :data:`ECONOMIES`; both registries and their plugins are
:mod:`merkat.runtime.economy_rules`', re-exported here): ``bid`` — each placed VM pays its bid
for the period (Merkat §2.2); ``use`` — the application deposits its bids into its hold
account and is charged what its VMs use at the clearing's prices (allocation x price, at most
the bid), the unspent deposit refunded (Tycoon §3). Charges are made before the plan reaches
the backend; an application that cannot pay its whole bill pays nothing and its VMs do not run
(:meth:`~merkat.core.period.Platform.withhold`). No account ever goes negative: every
movement is checked by the ledger.

Decision (docs/architecture.md): renewals are applied by the driver *before* the period
decides, since the balances they produce are the decision's input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from merkat.bank import memory_open, memory_renew
from merkat.bank.keys import budget_key
from merkat.bank.ledger import AccountKind, Ledger, Move
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import (
    VIRTUAL_BANK,
    Allowance,
    Allowances,
    Counted,
    CreditManager,
    ReturnBudget,
    _digest,
    hold_account,
)
from merkat.core.model import App, Charged, Decision, to_micro
from merkat.defaults import CHARGE_BY, ECONOMY, REDISTRIBUTE_EVERY
from merkat.runtime.economy_rules import (
    CHARGING,
    ECONOMIES,
    ByBid,
    ByUse,
    Charging,
    ClosedRules,
    EconomyError,
    MoneyRules,
    ThemisRules,
    UnknownRule,
)
from merkat.runtime.metering import MeteredUse

KINDS = ("application", "bank", "provider", "sub", "user")
"""The account kinds of ``summary()["balances"]`` (always all of them)."""


@dataclass
class Economy:
    """The money of one run, on ``ledger``. ``kind``: ``themis`` or ``closed``; ``charging``:
    ``bid`` or ``use``; ``redistribute_every``: K, the Virtual Bank's interval in periods
    (closed economy); ``idle_tax_ppm``: the idle tax rate (0: none); ``provider``: the account
    the charges go to; ``return_budgets``: the driver gives an ended application's money back
    to its owner by its end rule (:meth:`Driver.close_ended
    <merkat.runtime.driver.Driver.close_ended>` over :meth:`close`; on live, where the store's
    record of the end is written in the same transaction; off in the simulator's runs, whose
    books are pinned by the golden digests)."""

    ledger: Ledger
    kind: str = ECONOMY
    charging: str = CHARGE_BY
    redistribute_every: int = REDISTRIBUTE_EVERY
    idle_tax_ppm: int = 0
    provider: str = "provider"
    return_budgets: bool = False
    metered: bool = False  # charging "use" on measured CPU (merkat.runtime.metering)
    owner_funds: bool = False  # budgets moved from what owners hold, not minted (live)
    initial_budgets: int = 0
    returned: int = 0  # micro-credits given back to owners by ended applications
    redistributed: int = 0
    minted: int = 0  # every mint this economy made (initial budgets and allowances)
    allowances: Allowances = field(default_factory=Allowances)
    owners: Counted[str, str] = field(default_factory=Counted)
    fused_open: ClassVar[bool] = True  # open in one step on the in-memory ledger (False: the
    # four ledger calls, the reference; merkat.bank.memory_open)

    def __post_init__(self) -> None:
        rules, charging = ECONOMIES.get(self.kind), CHARGING.get(self.charging)
        if not isinstance(self.allowances, Allowances):  # (a plain dict given: counted too)
            self.allowances = Allowances(self.allowances)
        if not isinstance(self.owners, Counted):
            self.owners = Counted(self.owners)
        if self.redistribute_every < 1:
            raise EconomyError(f"redistribute_every must be >= 1, got {self.redistribute_every}")
        if not self.ledger.has_account(self.provider):
            self.ledger.create_account(self.provider, AccountKind.provider)
        self._charging = charging(self.provider)
        self._meter = MeteredUse(self.provider) if self.metered and self.charging == "use" \
            else None
        self._rules = rules(self.ledger, self.redistribute_every, self.idle_tax_ppm)
        self._kept_due: tuple[int, list[str], list[str]] | None = None
        self._table: memory_renew.Table | None = None
        # the last period's bills by account (charge's doc; the ledger may know a charge the
        # last one by their identity: merkat.bank.memory_pair)
        self._billed: tuple[object, object, tuple[tuple[str, int], ...]] = (None, None, ())

    # --- admission ----------------------------------------------------------------------

    def open(self, app: App, period: int) -> None:
        """Open ``app``'s account under its owner (created as a user account if new; an
        existing account is kept, with its money: the live service's recovery), mint its
        initial budget into the owner's account and move it to the application.

        On the in-memory ledger (``fused_open``) the two accounts, the mint and the move are
        one step (:func:`merkat.bank.memory_open.open_funded`) when it proves the four calls
        below would succeed as they are; otherwise (and with ``fused_open`` False, the
        reference) the four calls. ``tests/test_bank_open.py`` pins the two equal."""
        ledger, spec = self.ledger, app.spec
        owner = spec.owner
        if self.fused_open and ledger.__class__ is MemoryLedger and not self.owner_funds:
            initial = to_micro(spec.budget)
            if memory_open.open_funded(ledger, owner, app.account, initial, period):
                self.owners[app.account] = owner
                self.initial_budgets += initial
                self.minted += initial
                self._allowance(app)
                return
        if not ledger.has_account(owner):
            ledger.create_account(owner, AccountKind.user)
        if not ledger.has_account(app.account):  # (an application admitted again keeps it)
            ledger.create_account(app.account, AccountKind.application, owner=owner)
        self.owners[app.account] = owner
        initial = to_micro(spec.budget)
        if initial > 0 and self.owner_funds:  # the owner pays it from what she holds
            ledger.transfer(owner, app.account, initial, f"budget of {spec.id}",
                            idempotency_key=budget_key(app.account))
        elif initial > 0:
            ledger.mint(owner, initial, memory_open.MINT_REASON, period,
                        idempotency_key=memory_open.mint_key(app.account))
            ledger.transfer(owner, app.account, initial, memory_open.MOVE_REASON, period,
                            idempotency_key=memory_open.move_key(app.account))
            self.initial_budgets += initial
            self.minted += initial
        self._allowance(app)

    def _allowance(self, app: App) -> None:
        """Give the admitted ``app`` its renewal (:class:`Allowance`), if it has one."""
        spec = app.spec
        rate = to_micro(spec.renewal)
        cap = to_micro(spec.budget if spec.budget_cap is None else spec.budget_cap)
        if rate > 0 and cap > 0:
            self.allowances[app.account] = Allowance(rate, cap)

    # --- before the decision --------------------------------------------------------------

    def renew(self, period: int, accounts: Iterable[str]) -> int:
        """Move this period's renewals of ``accounts`` (the active applications) from their
        owners (themis: minted into the owners first). Returns the micro-credits minted.

        One pass over the due accounts, in name order, with one read of their balances:
        each account's renewal ``x = min(rate, cap - balance)`` (if positive) is both what
        its owner is minted for it (themis) and the credit manager's move, ``min(x, what
        the owner has left)``. This replaces asking :meth:`Allowance.due
        <merkat.bank.policies.Allowance.due>` per account, reading the balances twice and
        :meth:`CreditManager.plan <merkat.bank.policies.CreditManager.plan>` (kept as
        :meth:`renew_reference`, which an owner that is itself a renewed account takes: the
        mint changes its balance between the two reads). ``tests/test_renewal_one_pass.py``
        pins the two equal: the same mints, moves, balances and transfer ids. On the
        in-memory ledger with the themis rules it is one pass over the due accounts' kept
        rows instead (:mod:`merkat.bank.memory_renew`), pinned by the same tests."""
        allowances = self.allowances
        due = self._due(accounts)
        if not due:
            return 0
        ledger, owners = self.ledger, self.owners
        if ledger.__class__ is MemoryLedger and self._rules.mints_allowances:
            minted, self._table = memory_renew.renew(
                ledger, self._table, due, allowances, owners,
                (allowances.changes, owners.changes), period)
            if minted is not None:
                self.minted += minted
                return minted
        balances = ledger.balances(due)
        need: dict[str, int] = {}
        wants: list[tuple[str, str, int]] = []
        for a in due:
            allowance = allowances[a]
            x = allowance.cap - balances[a]
            if x > allowance.rate:
                x = allowance.rate
            if x > 0:
                owner = owners[a]
                need[owner] = need.get(owner, 0) + x
                wants.append((owner, a, x))
        if not need.keys().isdisjoint(balances):  # an owner renewed too: the reference
            return self.renew_reference(period, due)
        minted = 0
        if self._rules.mints_allowances and need:
            ledger.mint_many(sorted(need.items()), "allowance", period, f"allowance/{period}")
            minted = sum(need.values())
            self.minted += minted
            moves = wants  # each owner was just given at least what her accounts want
        else:  # what each owner has, given in name order of her accounts
            left = ledger.balances(need)
            moves = []
            for owner, a, x in wants:
                have = left[owner]
                if x > have:
                    x = have
                if x > 0:
                    left[owner] = have - x
                    moves.append((owner, a, x))
        if moves:
            ledger.transfer_many(moves, "credit manager", period, f"credit-manager/{period}")
        return minted

    def _due(self, accounts: Iterable[str]) -> list[str]:
        """The renewed ones of ``accounts`` (those with an allowance), each once, in name
        order. Kept between calls: a list of the same names as the last call's, while the
        allowances did not change (:attr:`Allowances.changes
        <merkat.bank.policies.Allowances.changes>` counts every write), gives the last answer (the driver passes
        the same active accounts period after period) instead of a set and a sort of them;
        ``tests/test_renewal_one_pass.py`` pins it to the fresh answer."""
        allowances = self.allowances
        key = allowances.changes
        kept = self._kept_due
        if kept is not None and kept[0] == key and accounts.__class__ is list \
                and accounts == kept[1]:
            return kept[2]
        due = sorted({a for a in accounts if a in allowances})
        if accounts.__class__ is list:
            self._kept_due = (key, list(accounts), due)  # (a copy: the caller may change it)
        return due

    def renew_reference(self, period: int, accounts: Iterable[str]) -> int:
        """:meth:`renew` as the policies state it, one step at a time (the reference its
        single pass is tested against): each due account asked its :class:`Allowance`, the
        owners minted what they need (themis), the balances read again and
        :meth:`CreditManager.plan <merkat.bank.policies.CreditManager.plan>`."""
        due = {a: self.allowances[a] for a in accounts if a in self.allowances}
        if not due:
            return 0
        ledger = self.ledger
        owners = {a: self.owners[a] for a in due}
        minted = 0
        if self._rules.mints_allowances:
            balances = ledger.balances(due)
            need: dict[str, int] = {}
            for a in sorted(due):
                x = due[a].due(balances[a])
                if x > 0:
                    need[owners[a]] = need.get(owners[a], 0) + x
            if need:
                ledger.mint_many(sorted(need.items()), "allowance", period, f"allowance/{period}")
                minted = sum(need.values())
                self.minted += minted
        balances = ledger.balances(set(due) | set(owners.values()))
        moves = CreditManager.plan(balances, owners, due)
        if moves:
            ledger.transfer_many(moves, "credit manager", period, f"credit-manager/{period}")
        return minted

    # --- after the decision ---------------------------------------------------------------

    def charge(self, decision: Decision, accounts: Mapping[str, str],
               measured: Mapping[str, float | None] | None = None) -> Charged:
        """Charge ``decision``'s bills (``accounts``: application id -> account). An application
        that cannot pay its whole bill pays nothing and is listed unpaid. ``measured``: each
        active application's CPU core-seconds since the last period, for charging by
        measured use (``metered``; :mod:`merkat.runtime.metering`). The same
        ``decision.bills`` tuple (immutable) and ``accounts`` as the last period's are billed
        as the same tuple: an application's account is named once, at submit."""
        period = decision.index
        # an admission between periods is charged in its own transaction (its own key)
        tag = f"/admission@{decision.time!r}" if decision.admission else ""
        if self._meter is not None:
            return self._meter.charge(self.ledger, decision, accounts, measured, tag)
        given = decision.bills
        if not given:
            return Charged({}, frozenset(), 0)
        billed = self._billed
        if billed[0] is given and billed[1] is accounts:
            bills = billed[2]
        else:
            bills = tuple([(accounts[a], x) for a, x in given])
            if given.__class__ is tuple and not tag:  # (an admission's: new each time)
                self._billed = (given, accounts, bills)
        charging = self._charging
        if charging.__class__ is ByBid:  # (a paid bill pays its amount: no map of amounts)
            paid_at, unpaid_at = charging.pay(self.ledger, period, bills, tag)
            paid = dict(given) if not unpaid_at else {given[k][0]: given[k][1]
                                                      for k in paid_at}
            return Charged(paid, frozenset([given[k][0] for k in unpaid_at]),
                           sum(paid.values()))
        usage: Sequence[int] = ()  # (charging by bid does not read it)
        if getattr(charging, "reads_usage", True):
            used = dict(decision.usage)
            usage = [used.get(a, 0) for a, _ in given]
        paid_k, unpaid_k = charging.charge(self.ledger, period, bills, usage, tag)
        paid = {given[k][0]: x for k, x in paid_k.items()}
        return Charged(paid, frozenset(given[k][0] for k in unpaid_k), sum(paid.values()))

    def settle_ended(self, measured: Mapping[str, float | None], period: int) -> dict[str, int]:
        """Charging by measured use: settle the open deposits of the applications ``measured``
        names (ids; their CPU core-seconds since the last reading), before their money goes
        home. Returns ``{application id: paid}`` ({} without metering)."""
        if self._meter is None:
            return {}
        # one key per period and set of applications: two ends in one period never collide
        tag = f"/end/{_digest(sorted(measured))}"
        return self._meter.settle(self.ledger, period, measured, tag, only=list(measured))

    def close(self, accounts: Iterable[str], period: int,
              also: Callable[[Any], None] | None = None, reason: str | None = None
              ) -> dict[str, int]:
        """The end rule of applications (:class:`~merkat.bank.policies.ReturnBudget`): the
        money left on each ended application's ``accounts`` (and its hold account) goes back
        to its owner, in one transaction with ``also`` (the caller's end-state write). Their
        renewals stop. Returns ``{account: micro-credits returned}``."""
        ledger = self.ledger
        owners: dict[str, str] = {}
        for a in accounts:
            owner = self.owners.get(a)
            if owner is None:
                owner = ledger.get_account(a).owner or ""
            owners[a] = owner
            self.allowances.pop(a, None)
        returned = ReturnBudget().apply(ledger, period, owners, also, reason)
        self.returned += sum(returned.values())
        return returned

    def forget(self, accounts: Iterable[str]) -> None:
        """Ended applications' ``accounts``: their renewals stop and the economy forgets their
        owners (the ledger keeps the accounts and their money)."""
        for a in accounts:
            self.allowances.pop(a, None)
            self.owners.pop(a, None)

    def redistribute(self, period: int) -> int:
        """Closed economy: every K periods, the idle tax (if any) then the Virtual Bank's
        redistribution of the provider's income. Returns the micro-credits given to users."""
        given = self._rules.redistribute(self.ledger, period)
        self.redistributed += given
        return given

    # --- the books ------------------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        """The counters a cut run needs to merge its pieces' books (micro-credits; O(1))."""
        return {"minted": self.minted, "initial_budgets": self.initial_budgets,
                "redistributed": self.redistributed,
                "provider": self.ledger.balance(self.provider)}

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``bank`` object (credits): minted, burned, initial budgets,
        redistributed, balances summed by account kind, and the audit."""
        audit = self.ledger.audit()
        by_kind: dict[str, int] = dict.fromkeys(KINDS, 0)
        balances = self.ledger.balances()
        kinds = {a.name: a.kind.value for a in self.ledger.accounts()}
        for name, b in balances.items():
            by_kind[kinds[name]] = by_kind.get(kinds[name], 0) + b
        negative = sum(1 for b in balances.values() if b < 0)
        m = 1_000_000
        return {
            "economy": self.kind,
            "charging": self.charging,
            "minted": audit.minted / m,
            "burned": audit.burned / m,
            "initial_budgets": self.initial_budgets / m,
            "redistributed": self.redistributed / m,
            "balances": {k: by_kind[k] / m for k in sorted(by_kind)},
            "negative_accounts": negative,
            "audit_ok": audit.ok and negative == 0,
        }


EconomyFactory = Callable[..., Economy]

__all__ = ["CHARGING", "ECONOMIES", "VIRTUAL_BANK", "ByBid", "ByUse", "Charging", "ClosedRules",
           "Economy", "EconomyError", "MoneyRules", "Move", "ThemisRules", "UnknownRule",
           "hold_account"]
