"""The service's persistence: users and API keys, platforms and their VMs, events, prices,
counters.

:func:`open_store` opens (creating if needed) the database at a URL — the bank's tables
through :func:`merkat.bank.db.open_ledger`, the service's through alembic migrations
(:func:`migrate`: an existing database is upgraded in place, its data kept) — and returns a
:class:`Store` sharing the ledger's engine. API keys are random 32-byte tokens
(``mk_`` + 43 url-safe characters) shown once and stored as their SHA-256 digest.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, insert, select, update

from merkat.bank.db import open_ledger
from merkat.bank.ledger import AccountKind
from merkat.bank.sql import SqlLedger
from merkat.service import schema as s
from merkat.service.limits import clip

MIGRATIONS = Path(__file__).parent / "migrations"


ACTIVE_STATES = ("queued", "waiting", "running", "suspended")
"""Platform states that have not ended."""


RESERVED_NAMES = ("provider", "virtual-bank")
"""Names no user may take: the bank's provider account (``ServiceConfig.provider``'s default)
and the Virtual Bank's (``merkat.bank.policies.VIRTUAL_BANK``)."""


class StoreError(ValueError):
    """A refused store operation (duplicate user, unknown user...)."""


@dataclass(frozen=True)
class User:
    name: str
    admin: bool


@dataclass(frozen=True)
class PlatformRow:
    name: str
    owner: str
    template: dict[str, Any]
    state: str
    submitted: float
    started: float | None
    ended: float | None
    outcome: str
    deadline: float | None = None  # absolute, set at admission (None: none, or not admitted)
    account: str | None = None  # its bank account, set at admission


@dataclass(frozen=True)
class VmRow:
    """One VM of an active platform as the last period left it (:meth:`Store.save_vms`)."""

    id: str
    platform: str
    index: int
    node: str | None
    state: str
    bid: dict[str, float]
    alloc: dict[str, float]


def migrate(engine: Engine) -> None:
    """Bring the service's tables to the newest revision (alembic ``upgrade head``)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def private_dir(path: Path) -> Path:
    """Make ``path`` (the data directory) and give it mode 0700 whatever the umask (nothing in
    it is any user's: docs/service.md, "Tenants and isolation"). Refused (:class:`StoreError`)
    for a shared directory (sticky bit, like ``/tmp``) or one of another owner."""
    import os
    import stat

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_mode & stat.S_ISVTX or st.st_uid != os.geteuid():
        raise StoreError(f"data_dir: {path} is a shared directory or not the server's: give a "
                         "directory of its own (it is made private, mode 0700)")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def private_sqlite(path: Path) -> None:
    """The SQLite file ``path`` (and its journal, WAL and shared-memory files, which SQLite
    creates with the database's mode) with mode 0600, created so before SQLite opens it."""
    import os

    private_dir(path.parent)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for f in (path, *(path.with_name(path.name + x) for x in ("-wal", "-shm", "-journal"))):
        if f.exists():
            os.chmod(f, 0o600)


def open_store(url: str) -> Store:
    """The store (and its ledger) at database ``url``, created or upgraded as needed (an
    SQLite file: mode 0600 in a 0700 directory, :func:`private_sqlite`)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        private_sqlite(Path(url[len("sqlite:///"):]))
    ledger = open_ledger(url, create=True)
    migrate(ledger.engine)
    return Store(ledger)


def vm_number(vm: str) -> int:
    """N of a VM id ``app/vmN`` (its creation order in its platform; -1 if not of that form)."""
    tail = vm.rsplit("/vm", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Store:
    """Typed access to the service's tables (each method one transaction)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger
        self.engine = ledger.engine
        self.event_chars = 2000  # an event's message, at most (config limits.event_chars)
        last = self.prices(limit=1)
        self.last_price: dict[str, Any] = last[-1] if last else {
            "time": None, "period": None, "cpu": 0.0, "memory": 0.0}

    # --- users and keys ------------------------------------------------------------------

    def add_user(self, name: str, admin: bool = False, budget: int = 0,
                 reserved: Iterable[str] = RESERVED_NAMES) -> str:
        """Create user ``name`` (a bank account of kind user, ``budget`` micro-credits minted
        into it with reason "initial budget") and return her new API key (shown once).

        A user's account is her name, so a name the bank uses for its own accounts is refused
        (:class:`StoreError`): ``reserved`` (the provider's, the Virtual Bank's), ``app:...``
        (platforms' accounts, now or later) and any existing account that is not a user's —
        else she would see, and could spend, the provider's income or a platform's budget."""
        from merkat.bank.ledger import check_name

        check_name(name, "user")
        if name in reserved or name.startswith("app:"):
            raise StoreError(f"user: {name!r} is a name the bank keeps for its own accounts "
                             "(the provider, the Virtual Bank, platforms' app:...); choose "
                             "another")
        if "/" in name:  # GET /accounts/{name}: the server decodes %2F before it routes
            raise StoreError(f"user: {name!r}: a user name has no '/' (her account's name is "
                             "a segment of the API's URLs)")
        if self.ledger.has_account(name):
            kind = self.ledger.get_account(name).kind
            if kind is not AccountKind.user:
                raise StoreError(f"user: {name!r} is the bank's {kind.value} account "
                                 f"{name!r}; choose another name")
        key = "mk_" + secrets.token_urlsafe(32)
        with self.engine.begin() as conn:
            if conn.execute(select(s.users.c.id).where(s.users.c.name == name)).first():
                raise StoreError(f"user {name!r} already exists")
            uid = conn.execute(insert(s.users).values(
                name=name, admin=admin, created=time.time())).inserted_primary_key[0]  # type: ignore[index]
            conn.execute(insert(s.api_keys).values(
                user_id=uid, digest=hash_key(key), prefix=key[:8], created=time.time()))
        if not self.ledger.has_account(name):
            self.ledger.create_account(name, AccountKind.user)
        if budget > 0:  # one key per user record: a name added again after removal is minted
            created = self._created(name)
            self.ledger.mint(name, budget, "initial budget",
                             idempotency_key=f"user-budget:{name}@{created!r}")
        return key

    def _created(self, name: str) -> float:
        with self.engine.connect() as conn:
            v = conn.execute(select(s.users.c.created).where(s.users.c.name == name)).scalar()
        if v is None:
            raise StoreError(f"unknown user {name!r}")
        return float(v)

    def new_key(self, name: str) -> str:
        """Another API key for user ``name``."""
        key = "mk_" + secrets.token_urlsafe(32)
        with self.engine.begin() as conn:
            uid = conn.execute(select(s.users.c.id).where(s.users.c.name == name)).scalar()
            if uid is None:
                raise StoreError(f"unknown user {name!r}")
            conn.execute(insert(s.api_keys).values(
                user_id=uid, digest=hash_key(key), prefix=key[:8], created=time.time()))
        return key

    def user_by_key(self, key: str) -> User | None:
        """The key's user, read from the database at every call: no cache, so a key removed
        by another process (``merkat user rotate-key`` / ``remove``) fails at once."""
        return self._user_by_digest(hash_key(key))

    def rotate_key(self, name: str) -> str:
        """Revoke every API key of user ``name`` and return her one new key (one
        transaction: she is never left without a key, nor with an old one)."""
        key = "mk_" + secrets.token_urlsafe(32)
        with self.engine.begin() as conn:
            uid = conn.execute(select(s.users.c.id).where(s.users.c.name == name)).scalar()
            if uid is None:
                raise StoreError(f"unknown user {name!r}")
            conn.execute(s.api_keys.delete().where(s.api_keys.c.user_id == uid))
            conn.execute(insert(s.api_keys).values(
                user_id=uid, digest=hash_key(key), prefix=key[:8], created=time.time()))
        return key

    def remove_user(self, name: str) -> None:
        """Delete user ``name`` and her API keys (refused while she has a platform that has
        not ended). Her bank account and its money stay: the books are never rewritten."""
        with self.engine.begin() as conn:
            uid = conn.execute(select(s.users.c.id).where(s.users.c.name == name)).scalar()
            if uid is None:
                raise StoreError(f"unknown user {name!r}")
            live = [r.name for r in conn.execute(
                select(s.platforms.c.name).where(s.platforms.c.owner == name,
                                                 s.platforms.c.state.in_(ACTIVE_STATES))
                .order_by(s.platforms.c.name))]
            if live:
                raise StoreError(f"user {name!r} has platforms that have not ended: "
                                 f"{', '.join(live[:10])}{' ...' if len(live) > 10 else ''}; "
                                 "stop them first (merkat platform stop NAME)")
            conn.execute(s.api_keys.delete().where(s.api_keys.c.user_id == uid))
            conn.execute(s.quotas.delete().where(s.quotas.c.user == name))
            conn.execute(s.users.delete().where(s.users.c.id == uid))
            conn.execute(s.state.delete().where(s.state.c.key == f"tenant:{name}"))  # retired

    def key_counts(self) -> dict[str, int]:
        """Each user's number of API keys."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(s.users.c.name, func.count(s.api_keys.c.id))
                                .join(s.api_keys, s.api_keys.c.user_id == s.users.c.id,
                                      isouter=True).group_by(s.users.c.name))
            return {r[0]: int(r[1]) for r in rows}

    def _user_by_digest(self, digest: str) -> User | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(s.users.c.name, s.users.c.admin)
                .join(s.api_keys, s.api_keys.c.user_id == s.users.c.id)
                .where(s.api_keys.c.digest == digest)).first()
        return User(row.name, bool(row.admin)) if row else None

    def user_id(self, name: str) -> int | None:
        """User ``name``'s row id, or None."""
        with self.engine.connect() as conn:
            v = conn.execute(select(s.users.c.id).where(s.users.c.name == name)).scalar()
        return None if v is None else int(v)

    def tenant_number(self, name: str) -> int | None:
        """User ``name``'s host number (her uid is ``tenants.uid_base`` + it: docs/service.md,
        "Tenants and isolation"), given the first time it is asked from a counter that never
        goes back, so no number is ever given to two users (a removed user's is retired: row
        ids may be reused, these never). None when there is no such user. One server
        allocates (its caller serialises the calls)."""
        key = f"tenant:{name}"
        with self.engine.begin() as conn:
            if conn.execute(select(s.users.c.id).where(s.users.c.name == name)).first() is None:
                return None
            got = conn.execute(select(s.state.c.value).where(s.state.c.key == key)).scalar()
            if got is not None:
                return int(got)
            nxt = conn.execute(select(s.state.c.value)
                               .where(s.state.c.key == "tenant:next")).scalar()
            n = int(nxt) if nxt is not None else 1
            if nxt is None:
                conn.execute(insert(s.state).values(key="tenant:next", value=str(n + 1)))
            else:
                conn.execute(update(s.state).where(s.state.c.key == "tenant:next")
                             .values(value=str(n + 1)))
            conn.execute(insert(s.state).values(key=key, value=str(n)))
            return n

    def users(self) -> list[User]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(s.users.c.name, s.users.c.admin).order_by(s.users.c.name))
            return [User(r.name, bool(r.admin)) for r in rows]

    # --- platforms -----------------------------------------------------------------------

    def add_platform(self, name: str, owner: str, template: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            if conn.execute(select(s.platforms.c.name).where(s.platforms.c.name == name)).first():
                raise StoreError(f"platform {name!r} already exists")
            conn.execute(insert(s.platforms).values(
                name=name, owner=owner, template=json.dumps(template), state="queued",
                submitted=time.time(), outcome=""))

    def set_platform(self, name: str, **values: Any) -> None:
        """Update columns of platform ``name`` (state, started, ended, outcome)."""
        with self.engine.begin() as conn:
            conn.execute(update(s.platforms).where(s.platforms.c.name == name).values(**values))

    def delete_platform(self, name: str) -> None:
        """Forget platform ``name``: its row and its stored VMs (one transaction). The bank
        and the events keep its history (:mod:`merkat.service.records`)."""
        with self.engine.begin() as conn:
            conn.execute(s.vms.delete().where(s.vms.c.platform == name))
            conn.execute(s.platforms.delete().where(s.platforms.c.name == name))

    def platform(self, name: str) -> PlatformRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(s.platforms).where(s.platforms.c.name == name)).first()
        return _platform(row) if row else None

    def platforms(self, owner: str | None = None, states: Iterable[str] | None = None,
                  ) -> list[PlatformRow]:
        q = select(s.platforms).order_by(s.platforms.c.submitted, s.platforms.c.name)
        if owner is not None:
            q = q.where(s.platforms.c.owner == owner)
        if states is not None:
            q = q.where(s.platforms.c.state.in_(list(states)))
        with self.engine.connect() as conn:
            return [_platform(r) for r in conn.execute(q)]

    def save_vms(self, rows: Mapping[str, Sequence[VmRow]]) -> None:
        """Replace the stored VMs of each platform named in ``rows`` (one transaction; an
        empty sequence forgets a platform's VMs)."""
        if not rows:
            return
        with self.engine.begin() as conn:
            conn.execute(s.vms.delete().where(s.vms.c.platform.in_(list(rows))))
            values = [{"id": v.id, "platform": v.platform, "idx": v.index, "node": v.node,
                       "state": v.state, "bid": json.dumps(v.bid), "alloc": json.dumps(v.alloc)}
                      for vms in rows.values() for v in vms]
            if values:
                conn.execute(insert(s.vms), values)

    def vms(self, platform: str) -> list[VmRow]:
        """The stored VMs of ``platform`` in creation order (``app/vmN`` by N)."""
        q = select(s.vms).where(s.vms.c.platform == platform)
        with self.engine.connect() as conn:
            rows = [VmRow(r.id, r.platform, r.idx, r.node, r.state, json.loads(r.bid),
                          json.loads(r.alloc)) for r in conn.execute(q)]
        return sorted(rows, key=lambda v: (vm_number(v.id), v.id))

    # --- events and prices ------------------------------------------------------------------

    def add_event(self, kind: str, message: str, platform: str | None = None,
                  owner: str | None = None, at: float | None = None) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(insert(s.events).values(
                time=time.time() if at is None else at, kind=kind, platform=platform,
                owner=owner, message=clip(message, self.event_chars))
                ).inserted_primary_key[0])  # type: ignore[index]

    def add_events(self, rows: list[tuple[str, str, str | None, str | None, float]]) -> None:
        """Several events (kind, message, platform, owner, time) in one transaction: a period
        of 200 VMs writes its events in one commit, not 200."""
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(s.events), [
                    {"kind": k, "message": clip(m, self.event_chars), "platform": p,
                     "owner": o, "time": t}
                    for k, m, p, o, t in rows])

    def events(self, after: int = 0, limit: int = 100, owner: str | None = None,
               platform: str | None = None, since: float | None = None,
               ) -> list[dict[str, Any]]:
        """Events with id > ``after``, oldest first (``owner``: hers only; ``since``: at or
        after that time)."""
        q = select(s.events).where(s.events.c.id > after).order_by(s.events.c.id).limit(limit)
        if since is not None:
            q = q.where(s.events.c.time >= since)
        if owner is not None:
            q = q.where(s.events.c.owner == owner)
        if platform is not None:
            q = q.where(s.events.c.platform == platform)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def events_tail(self, limit: int = 100, owner: str | None = None,
                    platform: str | None = None, since: float | None = None,
                    ) -> list[dict[str, Any]]:
        """The newest ``limit`` events, oldest first (``owner``: hers only; ``platform``:
        its only; ``since``: at or after that time)."""
        q = select(s.events).order_by(s.events.c.id.desc()).limit(limit)
        if owner is not None:
            q = q.where(s.events.c.owner == owner)
        if platform is not None:
            q = q.where(s.events.c.platform == platform)
        if since is not None:
            q = q.where(s.events.c.time >= since)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in reversed(list(conn.execute(q)))]

    def add_price(self, period: int, at: float, cpu: float, memory: float) -> None:
        self.last_price = {"time": at, "period": period, "cpu": cpu, "memory": memory}
        with self.engine.begin() as conn:
            conn.execute(s.prices.delete().where(s.prices.c.period == period))
            conn.execute(insert(s.prices).values(period=period, time=at, cpu=cpu, memory=memory))

    def prices(self, since: float = 0.0, limit: int = 1000) -> list[dict[str, Any]]:
        q = (select(s.prices).where(s.prices.c.time >= since)
             .order_by(s.prices.c.period.desc()).limit(limit))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in reversed(list(conn.execute(q)))]

    def last_period(self) -> int:
        """The index of the last recorded period (-1: none)."""
        with self.engine.connect() as conn:
            v = conn.execute(select(func.max(s.prices.c.period))).scalar()
        return -1 if v is None else int(v)

    def close(self) -> None:
        self.ledger.close()


def _platform(row: Any) -> PlatformRow:
    return PlatformRow(row.name, row.owner, json.loads(row.template), row.state, row.submitted,
                       row.started, row.ended, row.outcome, row.deadline, row.account)
