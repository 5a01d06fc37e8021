"""The in-memory ledger's journal, read: a transfer by id, an account's history, the audit.

:class:`~merkat.bank.memory.MemoryLedger` writes its journal in two forms (its writing is
``memory.py``'s): a single movement (a mint, a burn, a transfer) as its
:class:`~merkat.bank.ledger.Transfer` in ``_single`` by id, and a batch
(``transfer_many``, ``pay_each``, ``mint_many``) as one :class:`Batch` record that keeps the
batch's moves as given, its transfers made only when read (:meth:`JournalReads.get_transfer`
finds the batch by bisection over the batches' first ids). This module is that reading side,
a mixin of the ledger's state; with ``journal=False`` the batches are not kept and the audit
checks the totals and signs only.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from merkat.bank.errors import UnknownTransfer
from merkat.bank.ledger import Audit, Transfer, TransferKind, check_transfer_id


@dataclass(frozen=True)
class Batch:
    """One journaled batch: transfer ids ``first_id ..`` in the order of ``moves``."""

    first_id: int
    kind: TransferKind
    moves: tuple[tuple[str | None, str | None, int], ...]
    reason: str
    period: int | None
    key: str | None


class JournalReads:
    """The journal's reading methods of :class:`~merkat.bank.memory.MemoryLedger` (the
    state below is the ledger's, set by its ``__init__``)."""

    _journal: bool
    _index: dict[str, int]
    _bal: list[int]
    _single: dict[int, Transfer]
    _batches: list[Batch]
    _batch_starts: list[int]
    _minted: int
    _burned: int

    def _id(self, name: str, field: str = "account") -> int:
        raise NotImplementedError  # (the ledger's)

    def _batch_transfer(self, b: Batch, k: int) -> Transfer:
        payer, payee, amount = b.moves[k]
        return Transfer(b.first_id + k, b.kind, payer, payee, amount, b.reason, b.period, b.key)

    def get_transfer(self, transfer_id: int) -> Transfer:
        check_transfer_id(transfer_id)
        if transfer_id in self._single:
            return self._single[transfer_id]
        pos = bisect.bisect_right(self._batch_starts, transfer_id) - 1
        if pos >= 0:
            b = self._batches[pos]
            if transfer_id - b.first_id < len(b.moves):
                return self._batch_transfer(b, transfer_id - b.first_id)
        raise UnknownTransfer(transfer_id)

    def _all_transfers(self) -> list[Transfer]:
        out = list(self._single.values())
        for b in self._batches:
            out.extend(self._batch_transfer(b, k) for k in range(len(b.moves)))
        out.sort(key=lambda t: t.id)
        return out

    def history(self, account: str, limit: int | None = None) -> list[Transfer]:
        self._id(account)
        found = [t for t in self._all_transfers() if account in (t.payer, t.payee)]
        found.reverse()
        return found if limit is None else found[:limit]

    def audit(self) -> Audit:
        total = sum(self._bal)
        negative = sum(1 for b in self._bal if b < 0)
        mismatches = 0
        if self._journal:
            replay = dict.fromkeys(self._index, 0)
            for t in self._all_transfers():
                if t.payer is not None:
                    replay[t.payer] -= t.amount
                if t.payee is not None:
                    replay[t.payee] += t.amount
            mismatches = sum(1 for n, i in self._index.items() if replay[n] != self._bal[i])
        ok = total == self._minted - self._burned and negative == 0 and mismatches == 0
        return Audit(self._minted, self._burned, total, ok, negative, mismatches)
