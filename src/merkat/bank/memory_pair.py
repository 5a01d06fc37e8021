"""A period's renewal and charge applied again on the in-memory ledger, proved the last ones
in O(1).

Most periods of a trace renew each application to its cap and charge it the same bill as
the period before: the renewal gives back exactly what the charge took, account by account.
Then nothing the renewal reads has changed since it last ran, and the pair can be applied
again without reading a balance. The proof is kept as a :class:`Pair`, made by the general
path (:func:`merkat.bank.memory_renew.renew`'s loop, then
:meth:`MemoryLedger.pay_each <merkat.bank.memory.MemoryLedger.pay_each>`'s) and read in O(1):

- **renewal** (:func:`renew_again`): the last charge *cancelled* the renewal before it (its
  moves took from each account exactly what the renewal gave it, from no other account but
  the renewal's, and the payee is not a renewed account; checked once, when the pair is
  made: :func:`charged`), the ledger's next transfer id is the one that charge left (every
  balance change moves it: no operation since), and the renewal's :class:`Table
  <merkat.bank.memory_renew.Table>` is the same object (the same due list, allowances and
  owners). Then every due account's balance is the one before the last renewal, so this
  renewal's moves are the last ones: the accounts are written their kept balances after it
  (none read), the owners' mint and the moves journaled with the same moves, witnesses,
  new ids and this period's keys;
- **charge** (:func:`charge_again`): right after such a renewal (the next transfer id is
  the one it left), the same bills (the same tuple of tuples, by identity: immutable) to
  the same payee: every billed account's balance is the one before the last charge, so its
  result is the last one; the accounts are written back their balances before the renewal
  (the pair cancels), the payee credited, the batch journaled as before.

A pair that does not cancel is dropped (``ledger._pair = None``) and the loops run, which
are the reference (``MemoryLedger.repeats = False`` runs only them);
``tests/test_bank_pair.py`` pins the two equal: results, balances, journal, transfer ids,
idempotency witnesses and audit, over periods of renewals and charges (hypothesis) and over
``test_cow``'s flaky trace runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from merkat.bank.ledger import Move, check_total
from merkat.bank.witness import NO_KEY, Witness, witness

MemoryLedger = Any
"""A :class:`~merkat.bank.memory.MemoryLedger` (not imported: it imports this module)."""


@dataclass(eq=False)
class Pair:
    """A renewal (made by the loops, or again) and, once :func:`charged` found it cancelled,
    the charge that cancelled it: what applying them again needs."""

    table: Any  # the renewal's memory_renew.Table (by identity; it imports this module)
    moves: tuple[Move, ...]  # the renewal's credit-manager moves (owner, account, x)
    witness: Witness  # their batch witness
    owners: int  # the owners' mint's entries
    mint: tuple[tuple[None, str, int], ...]  # the owners' mint as journaled (or ())
    mint_witness: Witness
    minted: int
    renewed: int | None  # the next transfer id the renewal left (None: charged since)
    # set by charged(): the cancelling charge
    end: int = -1  # the next transfer id that charge left (-1: none yet)
    bills: object = None
    payee: str = ""
    payee_at: int = -1
    charge: tuple[Move, ...] = ()
    charge_witness: Witness = NO_KEY
    paid: tuple[int, ...] = ()
    unpaid: tuple[int, ...] = ()
    total: int = 0
    idx: tuple[int, ...] = ()  # the renewed accounts' ledger indexes
    before: tuple[int, ...] = ()  # their balances before the renewal (after the charge)
    after: tuple[int, ...] = ()  # and after it


def renewed(ledger: MemoryLedger, table: object, moves: tuple[Move, ...], fp: Witness,
            credits: list[tuple[str, int]], minted: int) -> None:
    """Keep the renewal the loops just journaled (``moves``, witness ``fp``; the owners'
    mint of ``credits``, ``minted`` in all) as the start of a pair."""
    mint = tuple((None, a, x) for a, x in credits) if ledger._journal else ()
    ledger._pair = Pair(table, moves, fp, len(credits), mint, witness("mint-batch", credits),
                        minted, ledger._next_id)


def renew_again(ledger: MemoryLedger, table: object, period: int, mint_key: str,
                move_key: str) -> int | None:
    """The renewal of ``table``'s accounts in ``period`` as the kept pair's (module doc):
    returns the micro-credits minted, or None when it is not proved the same (the loops
    then run). The keys are free and the period checked (the caller's)."""
    p: Pair | None = ledger._pair
    if p is None or p.table is not table or p.end != ledger._next_id:
        return None
    minted = p.minted
    check_total(ledger._minted - ledger._burned, minted)  # (raises before anything moved)
    bal = ledger._bal
    for i, b in zip(p.idx, p.after, strict=True):
        bal[i] = b
    # each owner is minted what her accounts take and gives it: her balance is as before
    ledger._minted += minted
    ledger._journal_mint(p.owners, p.mint, "allowance", period, mint_key, p.mint_witness)
    ledger._journal_batch(p.moves, "credit manager", period, move_key, p.witness)
    p.renewed = ledger._next_id
    return minted


def charged(ledger: MemoryLedger, start: int, bills: Sequence[tuple[str, int]], payee: str,
            paid: list[int], unpaid: list[int], total: int, moves: tuple[Move, ...]) -> None:
    """After the loops charged ``bills`` to ``payee`` (``moves``, journaled from transfer id
    ``start``): keep the pair when this charge came right after the kept renewal and
    cancelled it (module doc), else drop it. The bills are kept only as an immutable tuple
    of tuples (known the same by identity)."""
    p: Pair | None = ledger._pair
    if p is None:
        return
    if p.renewed != start or total != p.minted or len(moves) != len(p.moves) \
            or payee in p.table.key[1]:
        ledger._pair = None  # (the charge did not take what the renewal gave: no pair)
        return
    given = {a: x for _, a, x in p.moves}
    if given != {a: x for a, _, x in moves} or bills.__class__ is not tuple \
            or set(map(type, bills)) != {tuple}:
        ledger._pair = None
        return
    index, bal = ledger._index, ledger._bal
    idx = p.idx = tuple([index[a] for a in given])
    before = p.before = tuple([bal[i] for i in idx])
    p.after = tuple([b + x for b, x in zip(before, given.values(), strict=True)])
    p.end, p.renewed, p.bills, p.payee, p.payee_at = (ledger._next_id, None, bills, payee,
                                                       index[payee])
    p.charge, p.charge_witness = moves, witness("batch", moves)
    p.paid, p.unpaid, p.total = tuple(paid), tuple(unpaid), total


def charge_again(ledger: MemoryLedger, bills: Sequence[tuple[str, int]], payee: str,
                 reason: str, period: int | None, key: str | None
                 ) -> tuple[list[int], list[int], int, Sequence[int]] | None:
    """:meth:`MemoryLedger.pay_each <merkat.bank.memory.MemoryLedger.pay_each>` of ``bills``
    as the kept pair's charge (module doc), or None when it is not proved the same. The
    inputs are checked and the key free (the caller's)."""
    p: Pair | None = ledger._pair
    if p is None or p.renewed != ledger._next_id or p.bills is not bills or p.payee != payee:
        return None
    bal = ledger._bal
    for i, b in zip(p.idx, p.before, strict=True):
        bal[i] = b
    bal[p.payee_at] += p.total
    ids = ledger._journal_batch(p.charge, reason, period, key,
                                p.charge_witness if key is not None else NO_KEY)
    p.end, p.renewed = ledger._next_id, None
    return list(p.paid), list(p.unpaid), p.total, ids

