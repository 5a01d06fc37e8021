"""A themis period's renewals on the in-memory ledger in one pass over kept columns.

:meth:`Economy.renew <merkat.runtime.economy.Economy.renew>` on any ledger reads the due
accounts' balances, computes each renewal ``x = min(rate, cap - balance)``, mints what each
owner needs (``mint_many``) and moves it (``transfer_many``): four passes over the accounts,
each looking every name up again. On a :class:`~merkat.bank.memory.MemoryLedger` with the
``themis`` rules (owners are minted exactly what their accounts take, so no owner's balance
changes and none can be overdrawn) :func:`renew` does it in one pass over a
:class:`Table` — the due accounts as rows ``(ledger index, account, owner, rate, cap)``
resolved once and kept while the due list, the allowances and the owners are the same
(their :class:`~merkat.bank.policies.Counted` change counts) — crediting each account as it
goes; the owners' mint is the one small ``mint_many`` and the moves are journaled as one
batch, with the same ids, reasons, idempotency keys and witnesses as ``transfer_many``'s.

Anything unusual gives None and the caller takes the general path, which raises or answers
precisely: a key already used (a retry), an unknown account or owner, an owner that is itself
a due account (the reference's case). ``tests/test_renewal_one_pass.py`` pins the books equal
to :meth:`Economy.renew_reference <merkat.runtime.economy.Economy.renew_reference>`'s: the
same mints, moves, journal, transfer ids and balances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from merkat.bank.ledger import Move, check_period
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import Allowance
from merkat.bank.witness import witness


@dataclass
class Table:
    """The due accounts as rows resolved against one ledger: ``rows`` are ``(ledger index,
    account, owner, rate, cap)`` in the due list's order; ``ok`` is False when the one pass
    cannot take them (an unknown account or owner, an owner among the due accounts).
    ``key`` is what it was built for (checked by :func:`table`)."""

    key: tuple[object, ...]
    rows: list[tuple[int, str, str, int, int]]
    ok: bool


def table(kept: Table | None, ledger: MemoryLedger, due: list[str],
          allowances: Mapping[str, Allowance], allowance_changes: int,
          owners: Mapping[str, str], owner_changes: int) -> Table:
    """``kept`` while it was built for this ``ledger``, this ``due`` list (the same object:
    ``Economy._due`` gives its kept list again while nothing changed) and the same change
    counts of the allowances and owners; else a new :class:`Table` of ``due``."""
    key = (ledger, due, allowance_changes, owner_changes)
    if kept is not None and kept.key[0] is ledger and kept.key[1] is due \
            and kept.key[2:] == key[2:]:
        return kept
    index = ledger._index
    rows: list[tuple[int, str, str, int, int]] = []
    ok = True
    names = set(due)
    for a in due:
        allowance = allowances[a]
        owner = owners.get(a)
        i = index.get(a)
        if owner is None or i is None or owner not in index or owner in names:
            ok = False
            break
        rows.append((i, a, owner, allowance.rate, allowance.cap))
    return Table(key, rows, ok)


def renew(ledger: MemoryLedger, rows: Sequence[tuple[int, str, str, int, int]],
          period: int) -> int | None:
    """The themis renewals of ``rows`` (a :class:`Table`'s) in period ``period``: the owners
    minted what their accounts need (``allowance``, key ``allowance/{period}``), each account
    credited ``min(rate, cap - balance)`` from its owner (``credit manager``, key
    ``credit-manager/{period}``). Returns the micro-credits minted, or None when the general
    path must answer (a key used before, a bad period): nothing has moved then."""
    mint_key, move_key = f"allowance/{period}", f"credit-manager/{period}"
    idem = ledger._idem
    if mint_key in idem or move_key in idem:
        return None
    try:
        check_period(period)
    except ValueError:
        return None
    bal = ledger._bal
    need: dict[str, int] = {}
    moves: list[Move] = []
    credited: list[int] = []
    for i, a, owner, rate, cap in rows:
        b = bal[i]
        x = cap - b
        if x > rate:
            x = rate
        if x > 0:
            bal[i] = b + x
            credited.append(i)
            need[owner] = need.get(owner, 0) + x
            moves.append((owner, a, x))
    if not need:
        return 0
    try:
        ledger.mint_many(sorted(need.items()), "allowance", period, mint_key)
    except BaseException:  # (the total supply's bound: nothing stays credited)
        for i, (_, _, x) in zip(credited, moves, strict=True):
            bal[i] -= x
        raise
    # each owner was just minted what her accounts take and gives it: her balance is as
    # before, and no move overdraws her (transfer_many's check cannot fail)
    index = ledger._index
    for owner, x in need.items():
        bal[index[owner]] -= x
    batch = tuple(moves)
    ledger._journal_batch(batch, "credit manager", period, move_key, witness("batch", batch))
    return sum(need.values())
