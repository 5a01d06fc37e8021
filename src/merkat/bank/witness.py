"""What the in-memory ledger remembers of an operation for its idempotency key.

A key remembers a :data:`Witness` of its operation: its kind and Python's hash of its moves,
not the SHA-256 :func:`~merkat.bank.ledger.fingerprint` of their text that the SQL ledger
stores (which must compare across processes; an in-memory ledger never does).
``keep_last`` bounds what a ledger that remembers only its last N operations keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from merkat.bank.ledger import Transfer, check_moves, fingerprint

Witness = tuple[str, int | str]
"""An operation as its idempotency key remembers it: its kind and the hash of its moves
(:func:`witness`)."""


def witness(kind: str, moves: Sequence[Any]) -> Witness:
    """What an idempotency key remembers of an operation: its kind and Python's hash of its
    moves as tuples (a few µs: the moves are strings and ints, already hashed once). This
    replaces the SHA-256 :func:`~merkat.bank.ledger.fingerprint` of the moves' text (~17 µs
    for 50 moves, three times a period in a simulation). A reuse of the key for
    other moves is told from a retry as before, but for a 64-bit hash collision (2**-64).
    ``tests/test_bank_ledger.py``'s and ``tests/test_renewal_one_pass.py``'s idempotency tests
    pin it; moves that are not tuples of
    hashables (bad input, raised precisely later) fall back to the fingerprint.

    Moves that are tuples already (the ledgers' own batches) are hashed as they are: the same
    hash as their tuples', without making them again."""
    try:
        return kind, hash(tuple(moves))
    except TypeError:
        pass
    try:
        return kind, hash(tuple(map(tuple, moves)))
    except TypeError:
        if kind == "batch":
            check_moves(moves)  # bad input raises its precise InvalidInput here
        return kind, fingerprint(kind, moves)


NO_KEY: Witness = ("", "")


def witness_of(t: Transfer) -> Witness:
    """The witness of a single movement."""
    return witness_move(t.kind.value, t.payer, t.payee, t.amount)


def witness_move(kind: str, payer: str | None, payee: str | None, amount: int) -> Witness:
    """The witness of a single movement of ``kind`` (a :class:`~merkat.bank.ledger.TransferKind`'s
    value) not made into a :class:`~merkat.bank.ledger.Transfer` yet (:func:`witness_of`'s)."""
    return kind, hash((payer, payee, amount))


def keep_last(d: dict[Any, Any], n: int) -> None:
    """Drop the oldest entries of ``d`` (insertion order) beyond the last ``n``."""
    while len(d) > n:
        del d[next(iter(d))]
