"""``merkat bench bank``: throughput of the ledgers.

Measures, on a fresh SQLite file (in a temporary directory), on the in-memory ledger, and on
PostgreSQL when a URL is given (in a scratch schema, dropped afterwards):

- ``transfers_per_s``: sequential single transfers, each its own committed transaction;
- ``charge_s``: one period's charging of ``vms`` VMs (4 VMs per application, one provider)
  with :class:`~merkat.bank.policies.ChargeByBid` — balances read, plan, one transaction.
"""

from __future__ import annotations

import platform
import random
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from merkat.bank.db import open_ledger, parse_url
from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import ChargeByBid
from merkat.defaults import MICRO


def _measure(ledger: Ledger, transfers: int, vms: int) -> dict[str, Any]:
    rng = random.Random(1)
    users = [f"u{i}" for i in range(100)]
    for u in users:
        ledger.create_account(u, AccountKind.user)
        ledger.mint(u, 1_000_000 * MICRO, "bench")
    t0 = time.perf_counter()
    for _ in range(transfers):
        a, b = rng.sample(users, 2)
        ledger.transfer(a, b, rng.randint(1, 10 * MICRO), "bench")
    dt_transfers = time.perf_counter() - t0

    apps = [f"app{i}" for i in range((vms + 3) // 4)]
    ledger.create_account("provider", AccountKind.provider)
    ledger.transfer_many(
        [(users[i % len(users)], ledger.create_account(a, AccountKind.application, users[i % len(users)]).name, 100 * MICRO)
         for i, a in enumerate(apps)],
        "fund",
    )  # fmt: skip
    bills = [(apps[k // 4], rng.randint(1, 5 * MICRO)) for k in range(vms)]
    t0 = time.perf_counter()
    result = ChargeByBid("provider").apply(ledger, 1, bills)
    dt_charge = time.perf_counter() - t0
    audit = ledger.audit()
    return {
        "transfers": transfers,
        "transfers_per_s": round(transfers / dt_transfers, 1),
        "vms": vms,
        "charged_vms": len(result.paid),
        "charge_s": round(dt_charge, 4),
        "audit_ok": audit.ok,
    }


def run_bench(
    postgres_url: str | None = None, transfers: int = 2000, vms: int = 10_000
) -> dict[str, Any]:
    """Run the benchmark; return a JSON-able dict (see the module docstring)."""
    out: dict[str, Any] = {
        "benchmark": "bank",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        ledger = open_ledger(f"sqlite:///{Path(tmp) / 'bench.db'}", create=True)
        try:
            out["sqlite"] = _measure(ledger, transfers, vms)
        finally:
            ledger.close()
    out["memory"] = _measure(MemoryLedger(), transfers * 10, vms)
    if postgres_url is not None:
        parse_url(postgres_url)
        schema = f"merkat_bench_{secrets.token_hex(4)}"
        ledger = open_ledger(postgres_url, create=True, schema=schema)
        try:
            out["postgresql"] = _measure(ledger, transfers, vms)
        finally:
            with ledger.engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            ledger.close()
    return out
