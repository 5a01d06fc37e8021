"""A themis period's renewals on the in-memory ledger in one pass over kept columns.

:meth:`Economy.renew <merkat.runtime.economy.Economy.renew>` on any ledger reads the due
accounts' balances, computes each renewal ``x = min(rate, cap - balance)``, mints what each
owner needs (``mint_many``) and moves it (``transfer_many``): four passes over the accounts,
each looking every name up again. On a :class:`~merkat.bank.memory.MemoryLedger` with the
``themis`` rules (owners are minted exactly what their accounts take, so no owner's balance
changes and none can be overdrawn) :func:`renew` does it in one pass over a
:class:`Table` — the due accounts as rows ``(ledger index, account, owner, rate, cap)``
resolved once and kept while the due list, the allowances and the owners are the same
(their :class:`~merkat.bank.policies.Counted` change counts), else each account's row
taken from the last ones while its allowance and owner are the same (an admission or an
end changes the due list most periods of a trace) — crediting each account as it goes; the
owners' mint is the one small ``mint_many`` and the moves are journaled as one batch, with
the same ids, reasons, idempotency keys and witnesses as ``transfer_many``'s. A renewal
proved the last one (its table kept, the charge since cancelled it, no operation since) is
applied again without the pass (:mod:`merkat.bank.memory_pair`; ``MemoryLedger.repeats``).

Anything unusual gives None and the caller takes the general path, which raises or answers
precisely: a key already used (a retry), an unknown account or owner, an owner that is itself
a due account (the reference's case). ``tests/test_renewal_one_pass.py`` pins the books equal
to :meth:`Economy.renew_reference <merkat.runtime.economy.Economy.renew_reference>`'s: the
same mints, moves, journal, transfer ids and balances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from merkat.bank import memory_pair
from merkat.bank.ledger import Move, check_period
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import Allowance
from merkat.bank.witness import witness

Row = tuple[int, str, str, int, int, Allowance]
"""A due account resolved: ``(ledger index, account, owner, rate, cap, its Allowance)``."""


@dataclass
class Table:
    """The due accounts as :data:`Row` s resolved against one ledger, in the due list's
    order; ``key`` is what they were read for: the ledger, the due list and the change
    counts of the allowances and owners. ``cache`` holds each account's last row across
    tables, taken again while its Allowance and owner are the same objects."""

    key: tuple[object, ...]
    rows: list[Row]
    cache: dict[str, Row]


def renew(ledger: MemoryLedger, kept: Table | None, due: list[str],
          allowances: Mapping[str, Allowance], owners: Mapping[str, str],
          changes: tuple[int, int], period: int) -> tuple[int | None, Table | None]:
    """The themis renewals of the ``due`` accounts (``Economy._due``'s list) in period
    ``period``: the owners minted what their accounts need (``allowance``, key
    ``allowance/{period}``), each account credited ``min(rate, cap - balance)`` from its
    owner (``credit manager``, key ``credit-manager/{period}``). Returns the micro-credits
    minted, or None when the general path must answer (a key used before, a bad period, an
    unknown account or owner, an owner among the due accounts: nothing has moved then), and
    the :class:`Table` to give next time.

    ``kept`` (the last call's table) is read while it was built for this ledger, this
    ``due`` list (the same object: ``Economy._due`` gives its kept list again while nothing
    changed) and the same ``changes``; else the rows are read again (:func:`_rows`: each
    from the cache while its allowance and owner are the same)."""
    mint_key, move_key = f"allowance/{period}", f"credit-manager/{period}"
    idem = ledger._idem
    if mint_key in idem or move_key in idem:
        return None, kept
    try:
        check_period(period)
    except ValueError:
        return None, kept
    bal = ledger._bal
    need: dict[str, int] = {}
    moves: list[Move] = []
    if kept is None or kept.key[0] is not ledger or kept.key[1] is not due \
            or kept.key[2] != changes:
        kept = _rows(ledger, kept, due, allowances, owners, changes)
        if kept is None:
            return None, None
    elif ledger.repeats:  # the last renewal again, proved so in O(1) (memory_pair)
        minted = memory_pair.renew_again(ledger, kept, period, mint_key, move_key)
        if minted is not None:
            return minted, kept
    ledger._pair = None
    for i, a, owner, rate, cap, _ in kept.rows:
        b = bal[i]
        x = cap - b
        if x > rate:
            x = rate
        if x > 0:
            bal[i] = b + x
            need[owner] = need.get(owner, 0) + x
            moves.append((owner, a, x))
    if not need:
        return 0, kept
    if not need.keys().isdisjoint(due):  # an owner renewed too: the reference's case
        _undo(ledger, moves)
        return None, kept
    credits = sorted(need.items())
    try:
        ledger.mint_many(credits, "allowance", period, mint_key)
    except BaseException:  # (the total supply's bound: nothing stays credited)
        _undo(ledger, moves)
        raise
    # each owner was just minted what her accounts take and gives it: her balance is as
    # before, and no move overdraws her (transfer_many's check cannot fail)
    index = ledger._index
    for owner, x in need.items():
        bal[index[owner]] -= x
    batch = tuple(moves)
    fp = witness("batch", batch)
    ledger._journal_batch(batch, "credit manager", period, move_key, fp)
    minted = sum(need.values())
    if ledger.repeats:  # (kept: the next charge may cancel it)
        memory_pair.renewed(ledger, kept, batch, fp, credits, minted)
    return minted, kept


def _rows(ledger: MemoryLedger, kept: Table | None, due: list[str],
          allowances: Mapping[str, Allowance], owners: Mapping[str, str],
          changes: tuple[int, int]) -> Table | None:
    """The rows of ``due``: each taken from ``kept``'s cache while its Allowance and owner
    are the same objects, else resolved; None when an account or owner is unknown."""
    index = ledger._index
    cache: dict[str, Row] = kept.cache if kept is not None and kept.key[0] is ledger else {}
    if len(cache) > 2 * len(due) + 64:  # (ended accounts: the cache follows the active)
        cache = {r[1]: r for r in kept.rows} if kept is not None else {}
    rows: list[Row] = []
    for a in due:
        allowance = allowances[a]
        owner = owners.get(a)
        r = cache.get(a)
        if r is None or r[5] is not allowance or r[2] is not owner:
            i = index.get(a)
            if owner is None or i is None or owner not in index:
                return None
            r = cache[a] = (i, a, owner, allowance.rate, allowance.cap, allowance)
        rows.append(r)
    return Table((ledger, due, changes), rows, cache)


def _undo(ledger: MemoryLedger, moves: list[Move]) -> None:
    """Take back what the pass credited."""
    bal, index = ledger._bal, ledger._index
    for _, a, x in moves:
        bal[index[a]] -= x
