"""Hypothesis stateful test: any sequence of bank operations keeps the books balanced.

Over every ledger implementation: accounts, mints, burns, transfers (with reused idempotency
keys and overdraft attempts), renewals, the credit manager, charging by bid, deposits and
settlement by use (refunds), Virtual Bank redistribution, idle tax and token redemptions
(including replays). After every step: the audit is ok, minted/burned equal the model's,
sum of balances = minted - burned, and no balance is negative. Single movements are also
checked against exact expected balances (refused = unchanged, never clipped).
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from merkat.bank import tokens
from merkat.bank.db import open_ledger
from merkat.bank.errors import IdempotencyConflict, InsufficientFunds, TokenReplayed
from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import (
    Allowance,
    ChargeByBid,
    ChargeByUse,
    CreditManager,
    IdleTax,
    VirtualBank,
)
from test_bank_budget_support import Renewal
from test_bank_support import drop_schema, postgres_url

PRIVATE_PEM, PUBLIC_PEM = tokens.generate_key()
PRIVATE = tokens.load_private_key(PRIVATE_PEM)
PUBLIC = tokens.load_public_key(PUBLIC_PEM)

amounts = st.integers(min_value=1, max_value=50_000_000)
picks = st.integers(min_value=0, max_value=10_000)


class BankMachine(RuleBasedStateMachine):
    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        self.schema: str | None = None
        if self.backend == "memory":
            self.ledger: Ledger = MemoryLedger()
        elif self.backend == "sqlite":
            self.tmp = tempfile.TemporaryDirectory()
            self.ledger = open_ledger(f"sqlite:///{Path(self.tmp.name) / 'b.db'}", create=True)
        else:
            self.schema = f"h_{secrets.token_hex(6)}"
            self.ledger = open_ledger(postgres_url(), create=True, schema=self.schema)
        self.minted = 0
        self.burned = 0
        self.users: list[str] = []
        self.apps: list[str] = []
        self.providers: list[str] = []
        self.keys: dict[str, tuple[str, str, int]] = {}
        self.redeemed: list[str] = []
        self.period = 0

    def teardown(self) -> None:
        self.ledger.close()
        if self.tmp is not None:
            self.tmp.cleanup()
        if self.schema is not None:
            drop_schema(postgres_url(), self.schema)

    # --- helpers ---------------------------------------------------------------------

    def all_accounts(self) -> list[str]:
        return [a.name for a in self.ledger.accounts()]

    def pick(self, names: list[str], i: int) -> str:
        return names[i % len(names)]

    def next_period(self) -> int:
        self.period += 1
        return self.period

    # --- rules -----------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.ledger.create_account("broker", AccountKind.user)
        self.ledger.create_account("prov", AccountKind.provider)
        self.users.append("broker")
        self.providers.append("prov")

    @rule(kind=st.sampled_from(["user", "application", "provider"]), i=picks)
    def create(self, kind: str, i: int) -> None:
        name = f"{kind[0]}{len(self.all_accounts())}"
        if kind == "user":
            self.ledger.create_account(name, AccountKind.user)
            self.ledger.register_key(name, PUBLIC)
            self.users.append(name)
        elif kind == "application":
            self.ledger.create_account(
                name, AccountKind.application, owner=self.pick(self.users, i)
            )
            self.apps.append(name)
        else:
            self.ledger.create_account(name, AccountKind.provider)
            self.providers.append(name)

    @rule(i=picks, amount=amounts)
    def mint(self, i: int, amount: int) -> None:
        account = self.pick(self.all_accounts(), i)
        before = self.ledger.balance(account)
        self.ledger.mint(account, amount, "mint")
        self.minted += amount
        assert self.ledger.balance(account) == before + amount

    @rule(i=picks, amount=amounts)
    def burn(self, i: int, amount: int) -> None:
        account = self.pick(self.all_accounts(), i)
        before = self.ledger.balance(account)
        try:
            self.ledger.burn(account, amount, "burn")
        except InsufficientFunds:
            assert amount > before
            assert self.ledger.balance(account) == before
            return
        self.burned += amount
        assert self.ledger.balance(account) == before - amount

    @rule(i=picks, j=picks, amount=amounts, key=st.sampled_from([None, "k1", "k2", "k3"]))
    def transfer(self, i: int, j: int, amount: int, key: str | None) -> None:
        names = self.all_accounts()
        payer, payee = self.pick(names, i), self.pick(names, j)
        if payer == payee:
            return
        before = self.ledger.balances([payer, payee])
        expect_move = True
        if key is not None and key in self.keys:
            expect_move = False
            if self.keys[key] != (payer, payee, amount):
                with pytest.raises(IdempotencyConflict):
                    self.ledger.transfer(payer, payee, amount, "t", idempotency_key=key)
                assert self.ledger.balances([payer, payee]) == before
                return
        try:
            self.ledger.transfer(payer, payee, amount, "t", idempotency_key=key)
        except InsufficientFunds:
            assert expect_move and amount > before[payer]
            assert self.ledger.balances([payer, payee]) == before
            return
        if key is not None:
            self.keys[key] = (payer, payee, amount)
        after = self.ledger.balances([payer, payee])
        moved = amount if expect_move else 0
        assert after == {payer: before[payer] - moved, payee: before[payee] + moved}

    @rule(rate=amounts, cap=amounts)
    def renew(self, rate: int, cap: int) -> None:
        done = Renewal().apply(
            self.ledger, self.next_period(), {u: Allowance(rate, cap) for u in self.users}
        )
        self.minted += sum(done.values())
        assert all(self.ledger.balance(u) <= cap for u in done)  # never renewed above the cap

    @precondition(lambda self: self.apps)
    @rule(rate=amounts, cap=amounts)
    def credit_manager(self, rate: int, cap: int) -> None:
        CreditManager().apply(
            self.ledger, self.next_period(), {a: Allowance(rate, cap) for a in self.apps}
        )

    @precondition(lambda self: self.apps)
    @rule(bids=st.lists(st.tuples(picks, amounts), min_size=1, max_size=12))
    def charge_by_bid(self, bids: list[tuple[int, int]]) -> None:
        bills = [(self.pick(self.apps, i), x) for i, x in bids]
        before = self.ledger.balance("prov")
        result = ChargeByBid("prov").apply(self.ledger, self.next_period(), bills)
        assert self.ledger.balance("prov") == before + result.total
        assert sorted(result.paid + result.unpaid) == list(range(len(bills)))

    @precondition(lambda self: self.apps)
    @rule(deposits=st.lists(st.tuples(picks, amounts), min_size=1, max_size=5), used=amounts)
    def charge_by_use(self, deposits: list[tuple[int, int]], used: int) -> None:
        cbu = ChargeByUse("prov")
        entries = [(self.pick(self.apps, i), x) for i, x in deposits]
        cbu.reserve(self.ledger, self.next_period(), entries)
        usage = {a: used for a, _ in entries}
        settled = cbu.settle(self.ledger, self.next_period(), usage)
        for app in usage:
            assert self.ledger.balance(f"{app}:hold") == 0
            assert settled.charged.get(app, 0) <= used

    @rule()
    def virtual_bank(self) -> None:
        VirtualBank().apply(self.ledger, self.next_period())
        assert all(self.ledger.balance(p) == 0 for p in self.providers)

    @rule(ppm=st.integers(min_value=1, max_value=1_000_000))
    def idle_tax(self, ppm: int) -> None:
        IdleTax(ppm).apply(self.ledger, self.next_period())

    @rule(i=picks, amount=amounts)
    def redeem_token(self, i: int, amount: int) -> None:
        payer = self.pick([u for u in self.users if u != "broker"] or ["broker"], i)
        if payer == "broker" or self.ledger.balance(payer) < amount:
            return
        t = self.ledger.transfer(payer, "broker", amount, "to broker")
        token = tokens.issue(self.ledger, t.id, f"/CN={payer}", PRIVATE)
        before = self.ledger.balance("broker")
        r = tokens.redeem(self.ledger, token)
        assert self.ledger.balance("broker") == before - amount
        assert self.ledger.balance(r.sub_account) == amount
        self.redeemed.append(token)

    @precondition(lambda self: self.redeemed)
    @rule(i=picks)
    def replay_token(self, i: int) -> None:
        before = self.ledger.balances()
        with pytest.raises(TokenReplayed):
            tokens.redeem(self.ledger, self.pick(self.redeemed, i))
        assert self.ledger.balances() == before

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def books_balance(self) -> None:
        audit = self.ledger.audit()
        assert audit.ok, audit
        assert (audit.minted, audit.burned) == (self.minted, self.burned)
        balances = self.ledger.balances()
        assert sum(balances.values()) == self.minted - self.burned == audit.sum_of_balances
        assert min(balances.values(), default=0) >= 0


class MemoryMachine(BankMachine):
    backend = "memory"


class SqliteMachine(BankMachine):
    backend = "sqlite"


class PostgresMachine(BankMachine):
    backend = "postgresql"


_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

TestStatefulMemory = MemoryMachine.TestCase
TestStatefulMemory.settings = settings(max_examples=150, stateful_step_count=40, **_common)  # type: ignore[arg-type]

TestStatefulSqlite = SqliteMachine.TestCase
TestStatefulSqlite.settings = settings(max_examples=25, stateful_step_count=30, **_common)  # type: ignore[arg-type]

TestStatefulPostgres = pytest.mark.postgres(PostgresMachine.TestCase)
TestStatefulPostgres.settings = settings(max_examples=10, stateful_step_count=30, **_common)  # type: ignore[arg-type]
