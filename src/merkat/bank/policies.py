"""Bank policies: small objects that turn a period's facts into ledger movements.

Each policy has a pure ``plan`` (balances in, moves out: easy to test) and an ``apply`` that
reads what it needs from a :class:`~merkat.bank.ledger.Ledger` and executes the plan in one
transaction. Policies never ask the ledger for more than an account holds: an entry that cannot
be paid is reported (``unpaid``), not clipped by the ledger.

Idempotency: ``apply`` uses a key derived from the policy and the period (e.g.
``charge-by-bid/provider/12``), so applying a policy twice for one period moves money once; if
the second call computes different moves it raises ``IdempotencyConflict`` (already applied).

Papers: initial budget and renewal at a rate with a cap (Themis §III-A); periodic transfer from
a user to her application (Merkat §4.1.3, the credit manager); charging by bid (Merkat §2.2)
or by use with refund of the unspent deposit (Tycoon §3); the Virtual Bank that gathers
provider income and gives it back to users in equal parts, and a Mirage-style tax on idle
balances redistributed the same way (grid-cloud model §3.1, §5.1.2). See ``docs/bank.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from merkat.bank.errors import InvalidInput
from merkat.bank.ledger import AccountKind, Ledger, Move
from merkat.bank.ledger import affordable as _affordable

PPM = 1_000_000
_K = TypeVar("_K")
_V = TypeVar("_V")


def _positive(value: int, name: str, *, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise InvalidInput(
            name, f"must be a {'non-negative' if zero else 'positive'} integer, got {value!r}"
        )


def _digest(names: Sequence[str]) -> str:
    """A short stable digest of account names (tells two policy instances' keys apart)."""
    return hashlib.sha256("\x00".join(names).encode()).hexdigest()[:12]


def _due(period: int, every: int) -> bool:
    return period % every == 0


# --- budgets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowance:
    """A renewal: ``rate`` micro-credits per renewal, never lifting the balance above ``cap``."""

    rate: int
    cap: int

    def __post_init__(self) -> None:
        _positive(self.rate, "rate")
        _positive(self.cap, "cap")

    def due(self, balance: int) -> int:
        """What to add to an account holding ``balance``: ``min(rate, cap - balance)``, ≥ 0."""
        return max(0, min(self.rate, self.cap - balance))


class Counted(dict[_K, _V]):
    """A dict counting its writes in :attr:`changes`: whoever keeps an answer read from it
    (``Economy._due``, the economy's renewal table) knows it is still right while the count
    is the same, whatever wrote to it (a counter kept by the writers missed a removal and an
    addition between two reads: ``tests/test_renewal_kept.py``)."""

    changes: int = 0

    def __setitem__(self, key: _K, value: _V) -> None:
        self.changes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: _K) -> None:
        self.changes += 1
        super().__delitem__(key)

    def pop(self, key: _K, *default: Any) -> Any:
        self.changes += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[_K, _V]:
        self.changes += 1
        return super().popitem()

    def clear(self) -> None:
        self.changes += 1
        super().clear()

    def update(self, *a: Any, **k: Any) -> None:
        self.changes += 1
        super().update(*a, **k)

    def setdefault(self, key: _K, default: _V) -> _V:
        self.changes += 1
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> Counted[_K, _V]:  # type: ignore[override,misc]
        self.changes += 1
        return super().__ior__(other)


class Allowances(Counted[str, Allowance]):
    """The renewals by account (a :class:`Counted` dict)."""


@dataclass(frozen=True)
class CreditManager:
    """Every ``every`` periods, move each application's allowance from its owner's account
    (Merkat §4.1.3). An owner short of funds gives what she has, applications in name order;
    nothing is ever taken from an owner beyond her balance. Returns ``{application: moved}``."""

    every: int = 1

    def __post_init__(self) -> None:
        _positive(self.every, "every")

    @staticmethod
    def plan(
        balances: Mapping[str, int], owners: Mapping[str, str], allowances: Mapping[str, Allowance]
    ) -> list[Move]:
        left = {owners[a]: balances[owners[a]] for a in allowances}
        moves: list[Move] = []
        for app in sorted(allowances):
            owner = owners[app]
            amount = min(allowances[app].due(balances[app]), left[owner])
            if amount > 0:
                left[owner] -= amount
                moves.append((owner, app, amount))
        return moves

    def apply(
        self, ledger: Ledger, period: int, allowances: Mapping[str, Allowance]
    ) -> dict[str, int]:
        if not _due(period, self.every) or not allowances:
            return {}
        known = {a.name: a.owner for a in ledger.accounts(AccountKind.application)}
        owners: dict[str, str] = {}
        for app in allowances:
            owner = known.get(app)
            if owner is None:
                raise InvalidInput("allowances", f"{app!r} is not an application account")
            owners[app] = owner
        balances = ledger.balances(set(allowances) | set(owners.values()))
        moves = self.plan(balances, owners, allowances)
        ledger.transfer_many(moves, "credit manager", period, f"credit-manager/{period}")
        return {app: amount for _, app, amount in moves}


# --- charging -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChargeResult:
    """Outcome of a charge: indices (into the input) of paid and unpaid entries, the total."""

    paid: tuple[int, ...]
    unpaid: tuple[int, ...]
    total: int
    transfer_ids: Sequence[int] = field(default=(), repr=False)


def _check_entries(entries: Sequence[tuple[str, int]], name: str) -> None:
    for k, (_, amount) in enumerate(entries):
        if amount.__class__ is not int or amount < 0:  # (the usual case costs one test)
            _positive(amount, f"{name}[{k}].amount", zero=True)


@dataclass(frozen=True)
class ChargeByBid:
    """Merkat: every VM pays its bid for the period, from its application's account to the
    ``provider``. ``bills`` is one ``(application, bid)`` per VM; all VMs are charged in one
    transaction. A VM whose application cannot cover it (greedy, in input order) is not charged
    and is listed in ``unpaid`` (the period loop suspends it)."""

    provider: str

    @staticmethod
    def plan(
        bills: Sequence[tuple[str, int]], balances: Mapping[str, int], provider: str
    ) -> tuple[list[Move], list[int], list[int]]:
        """``(moves, paid, unpaid)``: :func:`~merkat.bank.ledger.affordable`'s greedy choice
        and the paid bills' moves to ``provider`` (what :meth:`apply` does in one
        :meth:`~merkat.bank.ledger.Ledger.pay_each`)."""
        paid, unpaid = _affordable(bills, balances)
        moves = [(bills[k][0], provider, bills[k][1]) for k in paid if bills[k][1] > 0]
        return moves, paid, unpaid

    def apply(self, ledger: Ledger, period: int, bills: Sequence[tuple[str, int]],
              tag: str = "") -> ChargeResult:
        """Charge ``bills`` in one transaction (idempotency key: the provider, the period and
        ``tag``, which tells an admission's charge between periods from the period's)."""
        paid, unpaid, total, ids = ledger.pay_each(  # (= plan, then one transaction)
            bills, self.provider, "charge by bid", period,
            f"charge-by-bid/{self.provider}/{period}{tag}")
        return ChargeResult(tuple(paid), tuple(unpaid), total, ids)


def hold_account(application: str) -> str:
    """The name of an application's hold (deposit) sub-account for charging by use."""
    return f"{application}:hold"


@dataclass(frozen=True)
class Settlement:
    charged: dict[str, int]
    refunded: dict[str, int]


@dataclass(frozen=True)
class ChargeByUse:
    """Tycoon: an application deposits funds (its bid) into its hold sub-account; at the end of
    the period it is charged for what it actually used, at most the deposit, and the unspent
    part is refunded. :meth:`reserve` is also how a running job is boosted with more funds."""

    provider: str

    def reserve(
        self, ledger: Ledger, period: int, deposits: Sequence[tuple[str, int]], tag: str = ""
    ) -> ChargeResult:
        """Move each ``(application, amount)`` into the application's hold account (created on
        first use). Deposits an application cannot cover are skipped and listed as unpaid."""
        _check_entries(deposits, "deposits")
        existing = {a.name for a in ledger.accounts(AccountKind.sub)}
        for app in sorted({a for a, _ in deposits}):
            if hold_account(app) not in existing:
                ledger.create_account(hold_account(app), AccountKind.sub, owner=app)
        balances = ledger.balances({a for a, _ in deposits})
        paid, unpaid = _affordable(deposits, balances)
        moves = [(deposits[k][0], hold_account(deposits[k][0]), deposits[k][1]) for k in paid]
        moves = [m for m in moves if m[2] > 0]
        ids = ledger.transfer_many(moves, "deposit", period, f"deposit/{self.provider}/{period}{tag}")
        return ChargeResult(tuple(paid), tuple(unpaid), sum(m[2] for m in moves), ids)

    @staticmethod
    def plan_settle(
        usage: Mapping[str, int], holds: Mapping[str, int], provider: str
    ) -> tuple[list[Move], Settlement]:
        moves: list[Move] = []
        charged: dict[str, int] = {}
        refunded: dict[str, int] = {}
        for app in sorted(usage):
            held = holds[app]
            charge = min(usage[app], held)
            refund = held - charge
            if charge:
                moves.append((hold_account(app), provider, charge))
                charged[app] = charge
            if refund:
                moves.append((hold_account(app), app, refund))
                refunded[app] = refund
        return moves, Settlement(charged, refunded)

    def settle(self, ledger: Ledger, period: int, usage: Mapping[str, int],
               tag: str = "") -> Settlement:
        """Charge each application ``min(used, held)`` and refund the rest of its hold."""
        for app, used in usage.items():
            _positive(used, f"usage[{app}]", zero=True)
        existing = {a.name for a in ledger.accounts(AccountKind.sub)}
        held = ledger.balances([hold_account(a) for a in usage if hold_account(a) in existing])
        holds = {app: held.get(hold_account(app), 0) for app in usage}
        moves, result = self.plan_settle(usage, holds, self.provider)
        ledger.transfer_many(moves, "charge by use", period, f"settle/{self.provider}/{period}{tag}")
        return result


# --- the end of an application -------------------------------------------------------------


@dataclass(frozen=True)
class ReturnBudget:
    """Budgets come home: when an application ends (finished, stopped, failed, deadline
    passed, out of budget) whatever its account holds — and its hold sub-account, a deposit
    not yet settled — goes back to its owner (Merkat §4.1.3: the credit manager moves money
    between a user and her applications, both ways). ``apply`` moves each ended application's
    money in one transaction (key ``return/<account>/<period>``), with ``also`` (the caller's
    own end-state write, :meth:`~merkat.bank.ledger.Ledger.transfer_many`) in the same
    transaction. Returns ``{application: returned}``."""

    reason: str = "budget returned"

    @staticmethod
    def plan(balances: Mapping[str, int], owners: Mapping[str, str]) -> list[Move]:
        """``balances`` of the ended applications' accounts and their hold accounts (absent:
        none), ``owners`` application -> owner: one move per non-empty account."""
        moves: list[Move] = []
        for app in sorted(owners):
            for account in (app, hold_account(app)):
                amount = balances.get(account, 0)
                if amount > 0:
                    moves.append((account, owners[app], amount))
        return moves

    def apply(self, ledger: Ledger, period: int, owners: Mapping[str, str],
              also: Callable[[Any], None] | None = None,
              reason: str | None = None) -> dict[str, int]:
        if not owners:
            if also is not None:
                ledger.transfer_many([], self.reason, period, also=also)
            return {}
        subs = {a.name for a in ledger.accounts(AccountKind.sub)}
        names = [n for app in owners for n in (app, hold_account(app))
                 if n in owners or n in subs]
        moves = self.plan(ledger.balances(names), owners)
        key = f"return/{_digest(sorted(owners))}/{period}"
        kw: dict[str, Any] = {} if also is None else {"also": also}
        ledger.transfer_many(moves, reason or self.reason, period, key, **kw)
        out: dict[str, int] = {}
        for payer, _, amount in moves:
            app = payer[: -len(":hold")] if payer.endswith(":hold") and payer not in owners \
                else payer
            out[app] = out.get(app, 0) + amount
        return out


# --- redistribution -----------------------------------------------------------------------

VIRTUAL_BANK = "virtual-bank"


@dataclass(frozen=True)
class Redistribution:
    gathered: int  # provider income moved to the Virtual Bank this time
    share: int  # what each user received
    users: int
    carried: int  # the remainder left in the Virtual Bank for next time


def split_equally(total: int, users: Sequence[str]) -> tuple[int, int]:
    """``(share, remainder)`` with ``share * len(users) + remainder == total``."""
    if not users:
        return 0, total
    return divmod(total, len(users))


@dataclass(frozen=True)
class VirtualBank:
    """Every ``every`` (K) periods, gather all provider income into the Virtual Bank account and
    give its whole balance back to the users in equal parts (grid-cloud model §3.1).

    Integer remainder: ``balance mod users`` micro-credits stay in the Virtual Bank account and
    are part of the next distribution (nothing vanishes, nothing is invented)."""

    every: int = 1
    account: str = VIRTUAL_BANK

    def __post_init__(self) -> None:
        _positive(self.every, "every")

    def ensure(self, ledger: Ledger) -> None:
        if not ledger.has_account(self.account):
            ledger.create_account(self.account, AccountKind.bank)

    @staticmethod
    def plan(
        providers: Mapping[str, int], users: Sequence[str], bank_balance: int, bank: str
    ) -> tuple[list[Move], Redistribution]:
        moves: list[Move] = [(p, bank, b) for p, b in sorted(providers.items()) if b > 0]
        gathered = sum(m[2] for m in moves)
        share, rest = split_equally(bank_balance + gathered, users)
        if share > 0:
            moves.extend((bank, u, share) for u in users)
        return moves, Redistribution(gathered, share, len(users), rest)

    def apply(self, ledger: Ledger, period: int) -> Redistribution | None:
        if not _due(period, self.every):
            return None
        self.ensure(ledger)
        providers = [a.name for a in ledger.accounts(AccountKind.provider)]
        users = [a.name for a in ledger.accounts(AccountKind.user)]
        balances = ledger.balances([*providers, self.account])
        moves, result = self.plan(
            {p: balances[p] for p in providers}, users, balances[self.account], self.account
        )
        ledger.transfer_many(moves, "virtual bank redistribution", period, f"virtual-bank/{period}")
        return result


@dataclass(frozen=True)
class IdleTax:
    """Mirage-style tax: every ``every`` periods, each user pays ``rate_ppm`` parts per million of
    her balance above ``exempt`` (rounded down to the micro-credit) to the Virtual Bank, which
    redistributes it with the provider income (:class:`VirtualBank`). "Idle" money is money
    sitting in a user account, not yet given to an application. Returns ``{user: tax}``."""

    rate_ppm: int
    every: int = 1
    exempt: int = 0
    account: str = VIRTUAL_BANK

    def __post_init__(self) -> None:
        _positive(self.rate_ppm, "rate_ppm")
        if self.rate_ppm > PPM:
            raise InvalidInput("rate_ppm", f"at most {PPM} (100 %), got {self.rate_ppm}")
        _positive(self.every, "every")
        _positive(self.exempt, "exempt", zero=True)

    def plan(self, balances: Mapping[str, int]) -> dict[str, int]:
        out = {
            u: (b - self.exempt) * self.rate_ppm // PPM
            for u, b in sorted(balances.items())
            if b > self.exempt
        }
        return {u: t for u, t in out.items() if t > 0}

    def apply(self, ledger: Ledger, period: int) -> dict[str, int]:
        if not _due(period, self.every):
            return {}
        VirtualBank(account=self.account).ensure(ledger)
        users = [a.name for a in ledger.accounts(AccountKind.user)]
        taxes = self.plan(ledger.balances(users))
        moves = [(u, self.account, t) for u, t in taxes.items()]
        ledger.transfer_many(moves, "idle tax", period, f"idle-tax/{period}")
        return taxes
