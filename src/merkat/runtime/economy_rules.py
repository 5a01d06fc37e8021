"""The economy's plugins, each a registry by name: how a decision's bills are paid
(:data:`CHARGING`: ``bid``, ``use``) and where money comes from and goes back to
(:data:`ECONOMIES`: ``themis``, ``closed``).

:class:`~merkat.runtime.economy.Economy` composes one of each over its ledger (and re-exports
these names: ``merkat.runtime.economy.CHARGING`` is this module's). Charging by bid pays each
placed VM's bid (Merkat §2.2); charging by use deposits the bids and charges what was used at
the clearing's prices (Tycoon §3); the themis rules mint the renewals every period (Themis
§III-A); the closed rules give the provider's income back every K periods (grid-cloud model
§3.1). The policies themselves (plan + one transaction) are :mod:`merkat.bank.policies`'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from merkat.bank.ledger import Ledger
from merkat.bank.policies import ChargeByBid, ChargeByUse, IdleTax, VirtualBank
from merkat.registry import Registry, UnknownName


class EconomyError(ValueError):
    """An unknown economy or charging name, or a bad parameter."""


class UnknownRule(UnknownName, EconomyError):
    """An unknown economy or charging name (the message lists the known ones)."""


class Charging(Protocol):
    """How a decision's bills are paid (a plugin of :data:`CHARGING`, by ``name``).

    ``charge(ledger, period, bills, usage, tag)``: ``bills`` are ``(account, micro-credits)``
    (one per application, the bids of its placed VMs), ``usage[k]`` what bill ``k``'s VMs used
    at the clearing's prices (a plugin whose class sets ``reads_usage = False`` is given
    ``()`` instead: :class:`ByBid`); ``tag`` makes the transactions' idempotency keys
    unique (an admission between periods). Returns ``(paid, unpaid)``: the amount paid per bill index, and
    the indexes of the bills that could not be paid (they pay nothing). All or nothing per
    transaction; never a negative balance."""

    name: ClassVar[str]

    def charge(self, ledger: Ledger, period: int, bills: Sequence[tuple[str, int]],
               usage: Sequence[int], tag: str) -> tuple[dict[int, int], frozenset[int]]: ...


CHARGING: Registry[Callable[[str], Charging]] = Registry("charging", error=UnknownRule)
"""Charging plugins by name (``@CHARGING.register`` on a class with a ``name``); each is made
with the provider's account."""


@CHARGING.register
class ByBid:
    """``bid``: each placed VM pays its bid for the period (Merkat §2.2)."""

    name: ClassVar[str] = "bid"
    reads_usage: ClassVar[bool] = False

    def __init__(self, provider: str) -> None:
        self.policy = ChargeByBid(provider)

    def charge(self, ledger: Ledger, period: int, bills: Sequence[tuple[str, int]],
               usage: Sequence[int], tag: str) -> tuple[dict[int, int], frozenset[int]]:
        paid, unpaid = self.pay(ledger, period, bills, tag)
        return {k: bills[k][1] for k in paid}, frozenset(unpaid)

    def pay(self, ledger: Ledger, period: int, bills: Sequence[tuple[str, int]],
            tag: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """:meth:`charge` as the indexes of the paid and the unpaid bills (a paid bill pays
        its whole amount): what :meth:`Economy.charge` reads of a charge by bid."""
        result = self.policy.apply(ledger, period, bills, tag)
        return result.paid, result.unpaid


@CHARGING.register
class ByUse:
    """``use``: the bids are deposited in the application's hold account, what the VMs used at
    the clearing's prices is charged and the rest refunded (Tycoon §3)."""

    name: ClassVar[str] = "use"

    def __init__(self, provider: str) -> None:
        self.policy = ChargeByUse(provider)

    def charge(self, ledger: Ledger, period: int, bills: Sequence[tuple[str, int]],
               usage: Sequence[int], tag: str) -> tuple[dict[int, int], frozenset[int]]:
        held = self.policy.reserve(ledger, period, bills, tag)
        settled = self.policy.settle(ledger, period,
                                     {bills[k][0]: usage[k] for k in held.paid}, tag)
        return ({k: settled.charged.get(bills[k][0], 0) for k in held.paid},
                frozenset(held.unpaid))


class MoneyRules(Protocol):
    """Where money comes from and goes back to (a plugin of :data:`ECONOMIES`, by ``name``).

    ``mints_allowances``: whether the owners receive, as a logged mint, what their
    applications' renewals need each period (else renewals only move what owners hold).
    ``redistribute(ledger, period)``: after a period, money back to the users; returns the
    micro-credits given."""

    name: ClassVar[str]
    mints_allowances: ClassVar[bool]

    def redistribute(self, ledger: Ledger, period: int) -> int: ...


ECONOMIES: Registry[Callable[..., MoneyRules]] = Registry("economy", error=UnknownRule)
"""Economies by name (``@ECONOMIES.register``); each is made with ``(ledger,
redistribute_every, idle_tax_ppm)``."""


@ECONOMIES.register
class ThemisRules:
    """``themis``: users receive their applications' renewals every period (Themis §III-A);
    nothing is given back."""

    name: ClassVar[str] = "themis"
    mints_allowances: ClassVar[bool] = True

    def __init__(self, ledger: Ledger, redistribute_every: int, idle_tax_ppm: int) -> None:
        pass

    def redistribute(self, ledger: Ledger, period: int) -> int:
        return 0


@ECONOMIES.register
class ClosedRules:
    """``closed``: no money enters after the initial budgets; every K periods the idle tax (if
    any), then the Virtual Bank returns the provider's income to the users in equal parts
    (grid-cloud model §3.1)."""

    name: ClassVar[str] = "closed"
    mints_allowances: ClassVar[bool] = False

    def __init__(self, ledger: Ledger, redistribute_every: int, idle_tax_ppm: int) -> None:
        self.every = redistribute_every
        self.bank = VirtualBank(redistribute_every)
        self.tax = IdleTax(idle_tax_ppm, redistribute_every) if idle_tax_ppm else None
        self.bank.ensure(ledger)

    def redistribute(self, ledger: Ledger, period: int) -> int:
        if (period + 1) % self.every:
            return 0
        if self.tax is not None:
            self.tax.apply(ledger, period + 1)
        result = self.bank.apply(ledger, period + 1)
        return result.share * result.users if result else 0



__all__ = ["CHARGING", "ECONOMIES", "ByBid", "ByUse", "Charging", "ClosedRules", "EconomyError",
           "MoneyRules", "ThemisRules", "UnknownRule"]
