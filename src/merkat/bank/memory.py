"""The in-memory ledger, for the simulator: the same contract as the SQL ledger, at memory speed.

Balances live in a Python list indexed by account number; a batch (:meth:`transfer_many`) is
one pass that applies its moves, one check that no payer is overdrawn (the batch is undone and
refused if one is: all or nothing, as the net-change check it replaces), and one journal
record that keeps the batch's moves as given (no per-move objects); a period's charge is one
pass (:meth:`pay_each`). An idempotency key remembers a hash of its operation's moves
(:mod:`merkat.bank.witness`), not their SHA-256. ``journal=False`` keeps no journal at all
(only the minted/burned totals and the single transfers tokens need), for very long runs.
``remember=N`` (with ``journal=False``) bounds what it keeps per operation: the idempotency
keys and single transfers of the last ``N`` operations only (a retry replays its key at once;
a simulation never replays), so that a run's bank grows with its accounts, not its periods.
The journal's reading side (a transfer by id, history, audit) is :mod:`merkat.bank.memory_journal`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from merkat.bank import memory_pair
from merkat.bank.errors import (
    IdempotencyConflict,
    InsufficientFunds,
    TokenReplayed,
    UnknownAccount,
)
from merkat.bank.ledger import (
    Account,
    AccountKind,
    Ledger,
    Move,
    Redemption,
    Transfer,
    TransferKind,
    check_amount,
    check_credits,
    check_identity,
    check_key,
    check_moves,
    check_name,
    check_new_account,
    check_period,
    check_reason,
    check_total,
    replayed_message,
)
from merkat.bank.memory_journal import Batch, JournalReads
from merkat.bank.witness import NO_KEY, Witness, keep_last, witness, witness_of


class MemoryLedger(JournalReads, Ledger):
    """A :class:`~merkat.bank.ledger.Ledger` held in process memory (lost at exit).
    ``repeats``: a renewal and charge proved the last ones are applied again
    (:mod:`merkat.bank.memory_pair`); False: the loops only (the reference)."""

    repeats: ClassVar[bool] = True

    def __init__(self, journal: bool = True, remember: int | None = None) -> None:
        if remember is not None and (journal or remember < 1):
            raise ValueError("remember: a positive count, and only without a journal")
        self._journal = journal
        self._remember = remember
        self._index: dict[str, int] = {}
        self._accounts: list[Account] = []
        self._bal: list[int] = []
        self._next_id = 1
        self._single: dict[int, Transfer] = {}
        self._batches: list[Batch] = []
        self._batch_starts: list[int] = []
        self._idem: dict[str, tuple[Witness, Transfer | range]] = {}
        self._keys: dict[str, bytes] = {}
        self._redeemed: dict[int, Redemption] = {}
        self._minted = 0
        self._burned = 0
        self._bank_id = secrets.token_hex(16)
        self._pair: memory_pair.Pair | None = None  # (memory_pair's proof)

    # --- accounts ----------------------------------------------------------------------

    def bank_id(self) -> str:
        """This bank's identity (random, per instance)."""
        return self._bank_id

    def _lookup(self, name: str) -> Account | None:
        i = self._index.get(name)
        return None if i is None else self._accounts[i]

    def _id(self, name: str, field: str = "account") -> int:
        i = self._index.get(name)
        if i is None:
            check_name(name, field)
            raise UnknownAccount(name, field)
        return i

    def create_account(
        self,
        name: str,
        kind: AccountKind,
        owner: str | None = None,
        identity: str | None = None,
        *,
        _token: bool = False,
    ) -> Account:
        check_identity(identity)
        k = check_new_account(name, kind, owner, self._lookup, token=_token)
        account = Account(name, k, owner, identity)
        self._index[name] = len(self._accounts)
        self._accounts.append(account)
        self._bal.append(0)
        return account

    def get_account(self, name: str) -> Account:
        return self._accounts[self._id(name)]

    def has_account(self, name: str) -> bool:
        return name in self._index

    def accounts(self, kind: AccountKind | None = None) -> list[Account]:
        found = [a for a in self._accounts if kind is None or a.kind is kind]
        return sorted(found, key=lambda a: a.name)

    def balance(self, name: str) -> int:
        return self._bal[self._id(name)]

    def balances(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """Balances of ``names`` (all accounts when None). The names are looked up in the
        index inline (half the cost of calling :meth:`_id` per name); an unknown or invalid
        name raises as :meth:`balance` does."""
        if names is None:
            return {a.name: b for a, b in zip(self._accounts, self._bal, strict=True)}
        if not isinstance(names, list | tuple):
            names = list(names)
        index, bal = self._index, self._bal
        try:
            return {n: bal[index[n]] for n in names}
        except (KeyError, TypeError):
            for n in names:  # raises the precise InvalidInput or UnknownAccount
                self._id(n)
            raise

    # --- movements ---------------------------------------------------------------------

    def _replay(self, key: str | None, witness: Witness) -> Transfer | range | None:
        """The result of the operation ``key`` named before, if any; raises
        ``IdempotencyConflict`` if it was another operation (another :func:`~merkat.bank.witness.witness`)."""
        if key is None or key not in self._idem:
            return None
        old, result = self._idem[key]
        if old != witness:
            raise IdempotencyConflict(key)
        return result

    def _record(self, t: Transfer, fp: Witness | None = None) -> Transfer:
        """Journal the single movement ``t`` (``fp``: its witness, when already made)."""
        self._next_id += 1
        single = self._single
        single[t.id] = t
        remember = self._remember
        if t.idempotency_key is not None:
            idem = self._idem
            idem[t.idempotency_key] = (witness_of(t) if fp is None else fp, t)
            if remember is not None and len(idem) > remember:
                keep_last(idem, remember)
        if remember is not None and len(single) > remember:
            keep_last(single, remember)
        return t

    def _move(
        self,
        kind: TransferKind,
        payer: str | None,
        payee: str | None,
        amount: int,
        reason: str,
        period: int | None,
        key: str | None,
    ) -> Transfer:
        src = None if payer is None else self._id(payer, "payer" if payee else "account")
        dst = None if payee is None else self._id(payee, "payee" if payer else "account")
        t = Transfer(self._next_id, kind, payer, payee, amount, reason, period, key)
        fp = None
        if key is not None:  # (its witness made once: replayed, or remembered by _record)
            fp = witness_of(t)
            old = self._replay(key, fp)
            if old is not None:
                assert isinstance(old, Transfer)
                return old
        if kind is TransferKind.mint:
            check_total(self._minted - self._burned, amount)
        if src is not None:
            if self._bal[src] < amount:
                raise InsufficientFunds(payer or "", self._bal[src], amount)
            self._bal[src] -= amount
        if dst is not None:
            self._bal[dst] += amount
        if kind is TransferKind.mint:
            self._minted += amount
        elif kind is TransferKind.burn:
            self._burned += amount
        return self._record(t, fp)

    def transfer_many(
        self,
        moves: Sequence[Move],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> Sequence[int]:
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        moves = tuple(moves)
        fp = witness("batch", moves) if idempotency_key is not None else NO_KEY
        old = self._replay(idempotency_key, fp)
        if old is not None:
            assert isinstance(old, range)
            if also is not None:
                also(None)
            return old
        if not moves:
            if also is not None:
                also(None)
            return range(self._next_id, self._next_id)
        index, bal = self._index, self._bal
        k = -1
        dipped = False  # a payer went below zero on the way (else none ends below it)
        try:  # applied move by move, checked after, undone if anything is wrong (below)
            for k, (payer, payee, amount) in enumerate(moves):  # noqa: B007
                if amount.__class__ is not int or amount <= 0 or payer == payee:
                    raise TypeError
                i = index[payer]
                j = index[payee]
                left = bal[i] - amount
                bal[i] = left
                bal[j] += amount
                if left < 0:
                    dipped = True
            k = len(moves)
            if dipped and any(bal[index[payer]] < 0 for payer, _, _ in moves):
                raise _Overdrawn
            if also is not None:  # if it raises, nothing moved
                also(None)
        except BaseException as exc:
            for payer, payee, amount in moves[:k]:
                bal[index[payer]] += amount
                bal[index[payee]] -= amount
            if isinstance(exc, TypeError | KeyError | ValueError | _Overdrawn):
                self._refuse(moves)  # raises the precise error
            raise
        return self._journal_batch(moves, reason, period, idempotency_key, fp)

    def _journal_batch(self, moves: tuple[Move, ...], reason: str, period: int | None,
                       key: str | None, fp: Witness) -> range:
        """The transfer ids of the batch ``moves`` just applied, journaled and remembered
        under ``key``."""
        ids = range(self._next_id, self._next_id + len(moves))
        self._next_id += len(moves)
        if self._journal:
            self._batches.append(Batch(ids.start, TransferKind.transfer, moves, reason, period,
                                        key))
            self._batch_starts.append(ids.start)
        if key is not None:
            self._idem[key] = (fp, ids)
            if self._remember is not None:
                keep_last(self._idem, self._remember)
        return ids

    def pay_each(
        self,
        bills: Sequence[tuple[str, int]],
        payee: str,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[list[int], list[int], int, Sequence[int]]:
        """:meth:`Ledger.pay_each <merkat.bank.ledger.Ledger.pay_each>` in one pass: each
        bill is checked, chosen and taken from its account's balance as it comes, the payee
        credited once. This replaces the reference's six passes (check the amounts, gather
        the accounts, read their balances, choose, apply, check) for a period's charge.
        Anything unusual (bad input, an unknown account, a bill of the payee's own account,
        a key used before) undoes what was taken and takes the reference, which gives its
        precise error or result; ``tests/test_renewal_one_pass.py`` pins the two equal.
        A charge proved the last one is applied again (:mod:`~merkat.bank.memory_pair`)."""
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        index, bal = self._index, self._bal
        if payee not in index or idempotency_key in self._idem:
            return super().pay_each(bills, payee, reason, period, idempotency_key)
        if again := self._pair and memory_pair.charge_again(self, bills, payee, reason,
                                                            period, idempotency_key):
            return again  # (the last charge again)
        unpaid: list[int] = []
        moves: list[Move] = []
        total = 0
        try:
            for k, (account, amount) in enumerate(bills):
                if amount.__class__ is not int or amount < 0 or account == payee:
                    raise TypeError
                i = index[account]
                have = bal[i]
                if have >= amount:
                    if amount:
                        bal[i] = have - amount
                        total += amount
                        moves.append((account, payee, amount))
                else:
                    unpaid.append(k)
        except BaseException as exc:  # (an interrupt too: nothing stays half taken)
            for account, _, amount in moves:
                bal[index[account]] += amount
            if not isinstance(exc, TypeError | KeyError | ValueError):
                raise
            return super().pay_each(bills, payee, reason, period, idempotency_key)
        paid = list(range(len(bills)))  # (the others than the unpaid, in order)
        if unpaid:
            skip = set(unpaid)
            paid = [k for k in paid if k not in skip]
        if not moves:
            return paid, unpaid, 0, range(self._next_id, self._next_id)
        bal[index[payee]] += total
        batch = tuple(moves)
        fp = witness("batch", batch) if idempotency_key is not None else NO_KEY
        ids = self._journal_batch(batch, reason, period, idempotency_key, fp)
        if self._pair is not None:  # (does it cancel the renewal before it?)
            memory_pair.charged(self, ids.start, bills, payee, paid, unpaid, total, batch)
        return paid, unpaid, total, ids

    def _refuse(self, moves: Sequence[Move]) -> None:
        """Raise what is wrong with the batch ``moves`` (applied to no balance): the precise
        ``InvalidInput`` of its first bad move, its unknown account, or the
        ``InsufficientFunds`` of the first account its net moves overdraw."""
        check_moves(moves)
        for payer, payee, _ in moves:
            self._id(payer, "payer")
            self._id(payee, "payee")
        net: dict[int, int] = {}
        for payer, payee, amount in moves:
            i, j = self._index[payer], self._index[payee]
            net[i] = net.get(i, 0) - amount
            net[j] = net.get(j, 0) + amount
        for i, delta in net.items():
            if self._bal[i] + delta < 0:
                raise InsufficientFunds(self._accounts[i].name, self._bal[i], -delta)

    def mint_many(
        self,
        credits: Sequence[tuple[str, int]],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sequence[int]:
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        index = self._index
        targets: list[int] | None = []
        total = 0
        try:  # known accounts (valid names) and positive int amounts: resolved in one pass
            for account, amount in credits:
                if amount.__class__ is not int or amount <= 0:
                    raise TypeError
                targets.append(index[account])  # type: ignore[union-attr]
                total += amount
        except (TypeError, ValueError, KeyError):
            check_credits(credits)  # raises the precise InvalidInput (an unknown account: below)
            targets = None
        fp = witness("mint-batch", credits) if idempotency_key is not None else NO_KEY
        old = self._replay(idempotency_key, fp)
        if old is not None:
            assert isinstance(old, range)
            return old
        if targets is None:  # an unknown account raises here
            targets = [self._id(account) for account, _ in credits]
            total = sum(amount for _, amount in credits)
        check_total(self._minted - self._burned, total)
        if not targets:
            return range(self._next_id, self._next_id)
        bal = self._bal
        for i, (_, amount) in zip(targets, credits, strict=True):
            bal[i] += amount
        self._minted += total
        return self._journal_mint(len(targets), tuple((None, a, x) for a, x in credits)
                                  if self._journal else (), reason, period, idempotency_key, fp)

    def _journal_mint(self, entries: int, moves: tuple[tuple[None, str, int], ...], reason: str,
                      period: int | None, key: str | None, fp: Witness) -> range:
        """The ids of a mint of ``entries`` just applied (``moves``), journaled and kept."""
        ids = range(self._next_id, self._next_id + entries)
        self._next_id += entries
        if self._journal:
            self._batches.append(Batch(ids.start, TransferKind.mint, moves, reason, period, key))
            self._batch_starts.append(ids.start)
        if key is not None:
            self._idem[key] = (fp, ids)
            if self._remember is not None:
                keep_last(self._idem, self._remember)
        return ids

    # --- keys and tokens ---------------------------------------------------------------

    def register_key(self, user: str, public_key: bytes) -> None:
        from merkat.bank.errors import InvalidInput

        account = self.get_account(user)
        if account.kind is not AccountKind.user:
            raise InvalidInput("user", f"{user!r} is a {account.kind.value} account, not a user")
        if len(public_key) != 32:
            raise InvalidInput("public_key", "an Ed25519 public key has 32 bytes")
        self._keys[user] = bytes(public_key)

    def public_key(self, user: str) -> bytes | None:
        self._id(user)
        return self._keys.get(user)

    def redeem(
        self, transfer_id: int, identity: str, sub_account: str, amount: int, payee: str
    ) -> Redemption:
        if transfer_id in self._redeemed:
            raise TokenReplayed(replayed_message(self._redeemed[transfer_id]))
        check_amount(amount)
        if self._bal[self._id(payee, "payee")] < amount:
            raise InsufficientFunds(payee, self.balance(payee), amount)
        self.create_account(
            sub_account, AccountKind.sub, owner=payee, identity=identity, _token=True
        )
        t = self.transfer(payee, sub_account, amount, f"token redemption of transfer {transfer_id}")
        r = Redemption(transfer_id, sub_account, identity, amount, t.id)
        self._redeemed[transfer_id] = r
        return r

    def close(self) -> None:
        pass


class _Overdrawn(Exception):
    """A batch overdraws an account (raised and caught inside :meth:`MemoryLedger.transfer_many`,
    which then raises the precise ``InsufficientFunds``)."""
