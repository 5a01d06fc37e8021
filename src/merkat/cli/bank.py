"""``merkat bank ...``: the ledger from the command line, and ``merkat bench bank``.

Every command takes ``--db URL`` (else ``$MERKAT_DB``, else a file under the user's data
directory) and ``-o json|table``. Amounts are typed and printed as exact decimal credits
("12.5"); JSON carries them as strings so no float ever touches money.
Exit codes: 0 done; 2 bad input (a field, an unknown account, a malformed URL or token), no
change; 1 refused or failed (insufficient funds, token refused, database unreachable), no change.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from merkat.bank.errors import (
    BadDatabaseURL,
    BankError,
    DuplicateAccount,
    InvalidInput,
    MalformedToken,
    UnknownAccount,
    UnknownTransfer,
)
from merkat.bank.ledger import AccountKind, Transfer
from merkat.bank.money import format_amount, parse_amount
from merkat.cli import bench
from merkat.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    OutputFormat,
    OutputOption,
    emit,
    fail,
    print_table,
)

if TYPE_CHECKING:
    from merkat.bank.sql import SqlLedger

# SQLAlchemy (merkat.bank.db, .sql) and cryptography (merkat.bank.tokens) are imported inside
# the commands that use them: `merkat --help` needs neither, `bank balance` no cryptography.

app = typer.Typer(
    help="The bank: accounts, transfers, audit, keys and transfer tokens.", no_args_is_help=True
)
account_app = typer.Typer(help="Create and list accounts.", no_args_is_help=True)
key_app = typer.Typer(help="Ed25519 keys for transfer tokens.", no_args_is_help=True)
token_app = typer.Typer(help="Signed transfer tokens (Tycoon).", no_args_is_help=True)
app.add_typer(account_app, name="account")
app.add_typer(key_app, name="key")
app.add_typer(token_app, name="token")

DbOption = typer.Option(
    None,
    "--db",
    help="Database URL (sqlite:///PATH or postgresql://...). Default: $MERKAT_DB, else a file in the user data dir.",
)
PeriodOption = typer.Option(
    None, "--period", min=0, max=2**63 - 1, help="Scheduling period number to record."
)
KeyOption = typer.Option(
    None, "--idempotency-key", help="Same key twice = the transfer happens once."
)

_BAD_INPUT = (
    InvalidInput,
    UnknownAccount,
    UnknownTransfer,
    DuplicateAccount,
    MalformedToken,
    BadDatabaseURL,
)

T = TypeVar("T")


@contextmanager
def _errors() -> Iterator[None]:
    """Turn bank errors into a one-line message and the right exit code."""
    try:
        yield
    except BankError as exc:
        fail(str(exc), EXIT_BAD_INPUT if isinstance(exc, _BAD_INPUT) else EXIT_FAILURE)


def _with_ledger(db: str | None, fn: Callable[[SqlLedger], T], *, create: bool = False) -> T:
    from merkat.bank.db import open_ledger

    with _errors():
        ledger = open_ledger(db, create=create)
        try:
            return fn(ledger)
        finally:
            ledger.close()
    raise AssertionError("unreachable")


def _amount(text: str, field: str = "amount") -> int:
    with _errors():
        return parse_amount(text, field)
    raise AssertionError("unreachable")


def _transfer_json(t: Transfer) -> dict[str, Any]:
    return {
        "id": t.id,
        "kind": t.kind.value,
        "payer": t.payer,
        "payee": t.payee,
        "amount": format_amount(t.amount),
        "reason": t.reason,
        "period": t.period,
        "idempotency_key": t.idempotency_key,
    }


_TRANSFER_COLUMNS = [
    "id",
    "kind",
    "payer",
    "payee",
    "amount",
    "reason",
    "period",
    "idempotency_key",
]


def _emit_transfers(fmt: OutputFormat, title: str, ts: list[Transfer]) -> None:
    """A list of transfers (``history``): ``{"items": [...]}`` in JSON, as every list."""
    data = [_transfer_json(t) for t in ts]
    emit(fmt, {"items": data},
         lambda: print_table(title, _TRANSFER_COLUMNS, [list(d.values()) for d in data]))


def _emit_transfer(fmt: OutputFormat, title: str, t: Transfer) -> None:
    """The one transfer a ``mint``, ``burn`` or ``transfer`` made: an object in JSON."""
    data = _transfer_json(t)
    emit(fmt, data, lambda: print_table(title, _TRANSFER_COLUMNS, [list(data.values())]))


def _emit_record(fmt: OutputFormat, title: str, data: dict[str, Any]) -> None:
    emit(
        fmt, data, lambda: print_table(title, ["field", "value"], [[k, v] for k, v in data.items()])
    )


# --- commands -----------------------------------------------------------------------------


@app.command("init")
def init(db: str | None = DbOption, output: OutputFormat = OutputOption) -> None:
    """Create the bank's tables (idempotent)."""
    from merkat.bank.db import parse_url, resolve_url

    _with_ledger(db, lambda _ledger: None, create=True)
    shown = parse_url(resolve_url(db)).render_as_string(hide_password=True)
    _emit_record(output, "bank", {"db": shown, "initialised": True})


@account_app.command("create")
def account_create(
    name: str = typer.Argument(..., help="Account name (letters, digits, _.:@/+-)."),
    kind: str = typer.Option(..., "--kind", help="user | application | provider | bank"),
    owner: str | None = typer.Option(None, "--owner", help="Owning user (applications)."),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Create an account with a zero balance."""
    if kind not in ("user", "application", "provider", "bank"):
        fail(f"kind: must be user, application, provider or bank, got {kind!r}")
    a = _with_ledger(db, lambda L: L.create_account(name, AccountKind(kind), owner))
    _emit_record(output, "account", {"name": a.name, "kind": a.kind.value, "owner": a.owner})


@account_app.command("list")
def account_list(
    kind: str | None = typer.Option(None, "--kind", help="Only this kind."),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """List accounts with their balances."""
    if kind is not None and kind not in {k.value for k in AccountKind}:
        fail(f"kind: must be one of {', '.join(k.value for k in AccountKind)}, got {kind!r}")

    def run(L: SqlLedger) -> list[dict[str, Any]]:
        bal = L.balances()
        return [
            {
                "name": a.name,
                "kind": a.kind.value,
                "owner": a.owner,
                "identity": a.identity,
                "balance": format_amount(bal[a.name]),
            }
            for a in L.accounts(None if kind is None else AccountKind(kind))
        ]

    data = _with_ledger(db, run)
    cols = ["name", "kind", "owner", "identity", "balance"]
    emit(output, {"items": data},
         lambda: print_table("accounts", cols, [[d[c] for c in cols] for d in data]))


@app.command("mint")
def mint(
    account: str = typer.Argument(...),
    amount: str = typer.Argument(..., help="Credits, e.g. 12.5 (at most 6 decimals)."),
    reason: str = typer.Option(..., "--reason", help="Why money is created (logged)."),
    period: int | None = PeriodOption,
    idempotency_key: str | None = KeyOption,
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Create money on an account (logged; raises the total)."""
    x = _amount(amount)
    t = _with_ledger(db, lambda L: L.mint(account, x, reason, period, idempotency_key))
    _emit_transfer(output, "mint", t)


@app.command("burn")
def burn(
    account: str = typer.Argument(...),
    amount: str = typer.Argument(..., help="Credits, e.g. 12.5 (at most 6 decimals)."),
    reason: str = typer.Option(..., "--reason", help="Why money is destroyed (logged)."),
    period: int | None = PeriodOption,
    idempotency_key: str | None = KeyOption,
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Destroy money from an account (logged; lowers the total)."""
    x = _amount(amount)
    t = _with_ledger(db, lambda L: L.burn(account, x, reason, period, idempotency_key))
    _emit_transfer(output, "burn", t)


@app.command("transfer")
def transfer(
    payer: str = typer.Argument(..., metavar="FROM"),
    payee: str = typer.Argument(..., metavar="TO"),
    amount: str = typer.Argument(..., help="Credits, e.g. 12.5 (at most 6 decimals)."),
    idempotency_key: str | None = KeyOption,
    reason: str = typer.Option("transfer", "--reason"),
    period: int | None = PeriodOption,
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Move money between two accounts (refused if FROM would go negative)."""
    x = _amount(amount)
    t = _with_ledger(db, lambda L: L.transfer(payer, payee, x, reason, period, idempotency_key))
    _emit_transfer(output, "transfer", t)


@app.command("balance")
def balance(
    account: str = typer.Argument(...),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Show an account's balance."""
    b = _with_ledger(db, lambda L: L.balance(account))
    data = {"account": account, "balance": format_amount(b)}
    emit(
        output,
        data,
        lambda: print_table(None, ["account", "balance"], [[account, data["balance"]]]),
    )


@app.command("history")
def history(
    account: str = typer.Argument(...),
    limit: int = typer.Option(
        50, "--limit", min=1, max=1_000_000, help="Newest first; at most this many."
    ),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Transfers touching an account, newest first."""
    ts = _with_ledger(db, lambda L: L.history(account, limit))
    _emit_transfers(output, f"history of {account}", ts)


@app.command("audit")
def audit(db: str | None = DbOption, output: OutputFormat = OutputOption) -> None:
    """Check the books: minted - burned == sum of balances (exit 1 when not)."""
    a = _with_ledger(db, lambda L: L.audit())
    data = {
        "minted": format_amount(a.minted),
        "burned": format_amount(a.burned),
        "sum_of_balances": format_amount(a.sum_of_balances),
        "ok": a.ok,
        "negative_accounts": a.negative_accounts,
        "journal_mismatches": a.journal_mismatches,
    }
    _emit_record(output, "audit", data)
    if not a.ok:
        print("error: the books do not balance", file=sys.stderr)
        raise typer.Exit(EXIT_FAILURE)


@key_app.command("generate")
def key_generate(
    private_key_file: Path = typer.Argument(
        ...,
        help="Where to write the private key (PEM, mode 0600); the public key goes to FILE.pub.",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
    db: str | None = typer.Option(
        None, "--db", help="Accepted like everywhere; key generation does not touch the bank."
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Generate an Ed25519 key pair for signing transfer tokens (local files only)."""
    from merkat.bank import tokens

    public_file = private_key_file.with_name(private_key_file.name + ".pub")
    for f in (private_key_file, public_file):
        if f.exists() and not force:
            fail(f"private_key_file: {f} exists (use --force to overwrite)")
    private_pem, public_pem = tokens.generate_key()
    from merkat.outputs import replace_all

    try:  # both files written (the private one created 0600) before either is replaced
        replace_all([(private_key_file, private_pem, 0o600), (public_file, public_pem, 0o644)])
    except OSError as exc:
        fail(f"private_key_file: cannot write {exc.filename}: {exc.strerror or exc}", EXIT_FAILURE)
    with _errors():
        kid = tokens.key_id(tokens.load_public_key(public_pem))
    _emit_record(
        output,
        "key",
        {"private_key": str(private_key_file), "public_key": str(public_file), "key_id": kid},
    )


@key_app.command("add")
def key_add(
    user: str = typer.Argument(...),
    public_key_file: Path = typer.Argument(
        ..., help="PEM Ed25519 public key (e.g. from `key generate`)."
    ),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Register (or replace) a user's public key."""
    from merkat.bank import tokens

    with _errors():
        raw = tokens.load_public_key(
            tokens.read_file(public_key_file, "public_key_file"), "public_key_file"
        )
    _with_ledger(db, lambda L: L.register_key(user, raw))
    _emit_record(output, "key", {"user": user, "key_id": tokens.key_id(raw)})


@token_app.command("issue")
def token_issue(
    transfer_id: int = typer.Argument(
        ..., help="Id of your transfer to the broker (from `merkat bank transfer`)."
    ),
    key: Path = typer.Option(..., "--key", help="Your private key file (PEM)."),
    identity: str = typer.Option(
        ..., "--identity", help="Identity the funds are bound to (e.g. a Grid DN)."
    ),
    ttl: float = typer.Option(
        7 * 86400, "--ttl", help="Seconds the token stays redeemable (default a week)."
    ),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Sign a receipt of one of your transfers, bound to an identity; print the token."""
    from merkat.bank import tokens

    with _errors():
        private = tokens.load_private_key(tokens.read_file(key, "key"), "key")
    token = _with_ledger(db, lambda L: tokens.issue(L, transfer_id, identity, private, ttl=ttl))
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps({"token": token}) + "\n")
    else:
        sys.stdout.write(token + "\n")


@token_app.command("redeem")
def token_redeem(
    token: str = typer.Argument(..., help="The token text, or - to read it from stdin."),
    db: str | None = DbOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Redeem a token once: fund a new sub-account of the payee bound to the token's identity."""
    from merkat.bank import tokens

    text = sys.stdin.read() if token == "-" else token
    r = _with_ledger(db, lambda L: tokens.redeem(L, text))
    data = {
        "transfer": r.transfer_id,
        "sub_account": r.sub_account,
        "identity": r.identity,
        "amount": format_amount(r.amount),
        "funding_transfer": r.funding_transfer_id,
    }
    _emit_record(output, "redeemed", data)


# --- benchmark ----------------------------------------------------------------------------


@bench.app.command("bank")
def bench_bank(
    postgres: str | None = typer.Option(
        None,
        "--postgres",
        help="Also measure on this PostgreSQL URL (a scratch schema is created and dropped).",
    ),
    transfers: int = typer.Option(2000, "--transfers", min=1, help="Single transfers to time."),
    vms: int = typer.Option(10_000, "--vms", min=1, help="VMs charged in one period."),
) -> None:
    """Transfers per second and one period's charging of N VMs, on SQLite (and PostgreSQL)."""
    from merkat.bench.bank import run_bench

    with _errors():
        result = run_bench(postgres_url=postgres, transfers=transfers, vms=vms)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
