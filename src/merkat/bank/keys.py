"""Idempotency-key namespaces: whose keys are whose.

The ledger stores every idempotency key in one table (``key -> fingerprint``), so a key is a
claim on a name: whoever writes a key first owns it, and a later, different operation under
it is refused (:class:`~merkat.bank.errors.IdempotencyConflict`). The live service therefore
never passes a key a user sent as it is:

- **a user's key** (``POST /transfers``, ``POST /platforms/{name}/boost``: the
  ``idempotency_key`` field) is stored as :func:`user_key` — ``u:<user>#<key>``. ``#`` is not
  a character of account or user names (:func:`~merkat.bank.ledger.check_name`), so the
  user part ends at the first ``#`` and two users' namespaces never meet; a user's retry
  finds her own key only;
- **the server's own keys** never start with ``u:`` (:data:`USER_PREFIX`), so no request
  can write one: the period's charges (``charge-by-bid/<provider>/<p>``, ``charge-by-use/...``),
  allowances (``allowance/<p>``), the Virtual Bank's and the idle tax's per-period keys, a
  platform's budget (``budget:NAME``, ``budget:NAME@G`` for the
  G-th platform of that name: :func:`budget_key`, one per account),
  and a user's initial budget (``user-budget:<name>@<created>``).

A key longer than fits the ledger's 200 characters is replaced by its SHA-256 (``~`` and 43
url-safe base64 characters) within the same namespace (:func:`user_key`), so a user may send any key of up to
:data:`MAX_USER_KEY` characters. The simulator's ledger never sees user keys: nothing here
changes its results.
"""

from __future__ import annotations

import base64
import hashlib


def budget_key(account: str) -> str:
    """The idempotency key of the budget an owner moves into application ``account`` at its
    admission (``budget:NAME``, ``budget:NAME@2``; :class:`merkat.runtime.economy.Economy`
    with ``owner_funds``)."""
    return f"budget:{account.removeprefix('app:')}"


USER_PREFIX = "u:"
"""Every user-sent key, and only those, starts with this."""

MAX_USER_KEY = 200
"""Longest key a user may send (characters)."""

LEDGER_KEY_MAX = 200
"""Longest key the ledger stores (:func:`~merkat.bank.ledger.check_key`)."""


def user_key(user: str, key: str | None) -> str | None:
    """``key`` as sent by ``user``, in her namespace (``None`` stays ``None``)."""
    if key is None:
        return None
    out = f"{USER_PREFIX}{user}#{key}"
    if len(out) > LEDGER_KEY_MAX:
        digest = base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()).decode()
        out = f"{USER_PREFIX}{user}#~{digest.rstrip('=')}"
    return out
