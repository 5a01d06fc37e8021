"""An application's account opened and funded on the in-memory ledger in one step.

:meth:`Economy.open <merkat.runtime.economy.Economy.open>`'s reference is four ledger calls
per admitted application: create its owner's user account (if new), create its application
account, mint its initial budget into the owner's account, transfer it to the application.
Each checks its arguments again, resolves its accounts, makes its idempotency witness, tries
to replay its key and trims the kept keys: ~179 K instructions an open (cachegrind, the
trace's ledger), 118 K in one step. :func:`open_funded` proves once, before anything changes, that the four calls
would all succeed without replaying anything (valid names, a new application account, an
owner that is new or a user, two keys never used, the mint under the bank's maximum total),
then applies their effects directly: the same accounts (in the same order), the same two
journaled :class:`~merkat.bank.ledger.Transfer` s with the same ids, reasons, keys and
witnesses, the same balances (the owner's net change is nil), minted total and kept keys
(trimmed once, to the same last ``remember``). Anything else returns False having changed
nothing, and the caller runs the four calls (the reference, which gives the precise error or
the replay). ``tests/test_bank_open.py`` pins the two equal (hypothesis: ledgers, journals,
ids, witnesses, audit and the errors of bad inputs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkat.bank.ledger import Account, AccountKind, Transfer, TransferKind, new_name_ok
from merkat.bank.money import MAX_AMOUNT, MAX_ID, MAX_TOTAL
from merkat.bank.witness import keep_last, witness_move

if TYPE_CHECKING:
    from merkat.bank.memory import MemoryLedger

_MINT, _MOVE = TransferKind.mint.value, TransferKind.transfer.value
MINT_REASON = "initial budget"
MOVE_REASON = "credit manager: initial budget"


def mint_key(account: str) -> str:
    """The idempotency key of the initial budget's mint for application ``account``."""
    return f"initial-budget/{account}"


def move_key(account: str) -> str:
    """The idempotency key of the initial budget's move to application ``account``."""
    return f"initial-transfer/{account}"


def open_funded(ledger: MemoryLedger, owner: str, account: str, amount: int,
                period: int) -> bool:
    """Open application ``account`` under user ``owner`` (created if new) and fund it with
    ``amount`` micro-credits minted into the owner's account (key :func:`mint_key`) then moved
    to it (key :func:`move_key`), as the four reference calls would; True if done, False if
    not proved (nothing changed)."""
    index = ledger._index
    if (amount.__class__ is not int or not 0 < amount <= MAX_AMOUNT
            or period.__class__ is not int or not 0 <= period <= MAX_ID
            or account in index or owner == account or not new_name_ok(account)):
        return False
    o = index.get(owner)
    if o is None:
        if not new_name_ok(owner):
            return False
    elif ledger._accounts[o].kind is not AccountKind.user:
        return False
    idem = ledger._idem
    k_mint, k_move = mint_key(account), move_key(account)
    if k_mint in idem or k_move in idem or ledger._minted - ledger._burned + amount > MAX_TOTAL:
        return False
    accounts, bal = ledger._accounts, ledger._bal
    if o is None:
        index[owner] = len(accounts)
        accounts.append(Account(owner, AccountKind.user))
        bal.append(0)
    index[account] = len(accounts)
    accounts.append(Account(account, AccountKind.application, owner))
    bal.append(amount)  # (minted into the owner's account, then moved here: the owner's nil)
    ledger._minted += amount
    n = ledger._next_id
    minted = Transfer(n, TransferKind.mint, None, owner, amount, MINT_REASON, period, k_mint)
    moved = Transfer(n + 1, TransferKind.transfer, owner, account, amount, MOVE_REASON, period,
                     k_move)
    ledger._next_id = n + 2
    single = ledger._single
    single[n] = minted
    single[n + 1] = moved
    idem[k_mint] = (witness_move(_MINT, None, owner, amount), minted)
    idem[k_move] = (witness_move(_MOVE, owner, account, amount), moved)
    remember = ledger._remember
    if remember is not None:
        if len(idem) > remember:
            keep_last(idem, remember)
        if len(single) > remember:
            keep_last(single, remember)
    return True
