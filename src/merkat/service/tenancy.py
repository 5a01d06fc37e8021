"""What one user's submission may not do to the others: take a name that is someone
else's, commit money she does not have, leave half an admission behind.

- :func:`check_submit` (``Manager.submit``, under the manager's lock): the platform's name
  is free (:class:`NameTaken`, 409: the same words whoever holds it, so the owner is never
  revealed), the budget fits what the owner has left once the budgets of her queued
  platforms are set aside (those are moved only at admission), and her quotas
  (:mod:`merkat.service.quotas`). Refused → nothing stored, the name stays free.
- :func:`check_admission` (``Manager._admit``, before anything is created): the budget
  still fits the owner's balance (she may have moved money since she submitted); refused →
  the platform ends ``failed`` with that reason.
- :func:`forget`: what an admission that failed half-way left in memory (the platform's
  record, queue entry, launcher) is removed, so no zombie stays in the period.

A name is taken while its platform record exists; ``platform delete`` frees it for anyone
(:mod:`merkat.service.records`: the next platform of that name gets a bank account of its
own, ``app:NAME@2``, so nothing of the first one's money or keys reaches it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkat.bank.money import format_amount
from merkat.core.period import AppStatus, to_micro
from merkat.service.db import StoreError
from merkat.service.quotas import check_submit as check_quotas

if TYPE_CHECKING:
    from merkat.service.context import ManagerState
    from merkat.service.db import PlatformRow
    from merkat.service.templates import Template


class NameTaken(StoreError):
    """The platform name is in use (by anyone: the message does not say by whom)."""

    status = 409

    def __init__(self, name: str) -> None:
        super().__init__(f"name: platform name {name!r} is taken; choose another")


class OverBudget(StoreError):
    """The budget exceeds what the owner has left."""

    status = 422


def check_submit(m: ManagerState, owner: str, t: Template) -> None:
    """Refuse a submission (module doc): :class:`NameTaken`, :class:`OverBudget`,
    :class:`~merkat.service.quotas.QuotaExceeded`. The caller holds the manager's lock."""
    store, ledger = m.store, m.store.ledger
    if store.platform(t.name) is not None:
        raise NameTaken(t.name)
    check_quotas(m, owner, t)
    balance = ledger.balance(owner) if ledger.has_account(owner) else 0
    queued = [r for r in store.platforms(owner, states=("queued",))]
    committed = sum(to_micro(float(r.template.get("budget", 0.0))) for r in queued)
    need = to_micro(t.budget)
    if need > balance - committed:
        extra = (f" less the budgets of her {len(queued)} queued platform(s), "
                 f"{format_amount(committed)}: {format_amount(max(0, balance - committed))} "
                 "left" if committed else "")
        raise OverBudget(f"budget: {t.budget:g} exceeds {owner}'s balance "
                         f"{format_amount(balance)}{extra}")


def check_admission(m: ManagerState, row: PlatformRow, t: Template) -> None:
    """Refuse (``ValueError``) the admission of ``row`` when its budget no longer fits its
    owner's balance."""
    ledger = m.store.ledger
    balance = ledger.balance(row.owner) if ledger.has_account(row.owner) else 0
    if to_micro(t.budget) > balance:
        raise ValueError(f"budget: {t.budget:g} exceeds {row.owner}'s balance "
                         f"{format_amount(balance)} at admission (money moved since the "
                         "submission)")


def forget(m: ManagerState, name: str) -> None:
    """Remove what a failed admission of ``name`` left in memory (module doc)."""
    p = m.platform
    app = p.apps.get(name)
    if app is not None and not app.columns[0] and app.status is AppStatus.WAITING:  # this one's
        p.apps.pop(name, None)
        p.active.pop(name, None)
        if name in p.queue:
            p.queue.remove(name)
    if name in p.active:
        return
    m.live.pop(name, None)
    m.backend.unregister(name)
