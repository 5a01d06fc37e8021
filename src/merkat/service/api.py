"""The REST API under ``/api/v1`` (FastAPI; OpenAPI at ``/api/v1/openapi.json``).

:func:`create_app` is the app factory: it takes a :class:`~merkat.service.manager.Manager`
(which holds the store, the platform and the backend) and returns the ASGI app; extensions
(the dashboard, Prometheus ``/metrics``) add routers to it. Every route but ``/health`` needs
an API key (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``): no or bad key → 401. A user
sees her own platforms, accounts and events; an admin sees all; someone else's object → 404.
Invalid bodies → 422 with ``detail`` one line naming the field (``errors``: pydantic's list).
Amounts of money are decimal strings ("12.5"), as in the bank's CLI. An ``idempotency_key``
lives in its sender's namespace (:mod:`merkat.bank.keys`): it can never meet another user's
key or the server's own; reusing one's own key for a different operation → 409.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from merkat.bank.errors import BankError, IdempotencyConflict
from merkat.bank.keys import user_key
from merkat.bank.money import format_amount, parse_amount
from merkat.control.types import VMState
from merkat.service.backends import Labelled, Reserving, Suspending
from merkat.service.db import StoreError, User
from merkat.service.http import install_errors
from merkat.service.limits import InputError, Slots, load_json
from merkat.service.manager import Manager, NotFound
from merkat.service.openapi import install as install_openapi
from merkat.service.status import platform_status, platforms_status
from merkat.service.templates import METRIC_FIELDS, TemplateError, parse, validate

PREFIX = "/api/v1"
MAX_ID = 2**63 - 1  # the database's integers

_KEY_REUSED = ("idempotency_key: already used by you for a different operation (a key names "
               "one operation; send a new key)")


class MetricsBody(BaseModel):
    """Metrics an application pushes (any subset of :data:`METRIC_FIELDS`)."""

    model_config = {"extra": "forbid", "allow_inf_nan": False}
    performance: float | None = None
    reference: float | None = None
    work_done: float | None = Field(None, ge=0)
    work_total: float | None = Field(None, ge=0)
    progress_rate: float | None = Field(None, ge=0)
    ideal_rate: float | None = Field(None, gt=0)
    tasks_left: int | None = Field(None, ge=0)
    task_time_avg: float | None = Field(None, ge=0)
    task_time_max: float | None = Field(None, ge=0)


class TransferBody(BaseModel):
    model_config = {"extra": "forbid", "populate_by_name": True}
    source: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    amount: str = Field(min_length=1, max_length=40)
    reason: str = Field("transfer", max_length=200)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)


class BoostBody(BaseModel):
    model_config = {"extra": "forbid"}
    amount: str = Field(min_length=1, max_length=40)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)


class TokenBody(BaseModel):
    model_config = {"extra": "forbid"}
    token: str = Field(min_length=1, max_length=10_000)


class KeyBody(BaseModel):
    model_config = {"extra": "forbid"}
    public_key: str = Field(min_length=1, max_length=10_000)


def api_key(request: Request) -> str | None:
    """The API key a request carries (``X-API-Key``, else ``Authorization: Bearer``)."""
    key = request.headers.get("x-api-key")
    authorization = request.headers.get("authorization")
    if key is None and authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    return key


def current_user(
        request: Request,
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
        x_api_key: Annotated[str | None, Header(include_in_schema=False)] = None) -> User:
    """The caller, from her API key; 401 without a valid one. Looked up in the database at
    every request (a worker thread, not the event loop): a key revoked by ``merkat user
    rotate-key`` / ``remove`` fails at once."""
    key = x_api_key
    if key is None and authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    found = None
    if key:
        from merkat.service.db import hash_key
        from merkat.service.dbdown import is_db_error

        memory = request.app.state.keys_seen
        try:
            found = request.app.state.manager.store.user_by_key(key)
        except Exception as exc:  # the database fails: a key valid a moment ago still is
            found = memory.recall(hash_key(key)) if is_db_error(exc) else None
            if found is None:
                raise
        else:
            if found is not None:
                memory.seen(hash_key(key), found)
    if found is None:
        raise HTTPException(401, "missing or invalid API key",
                            headers={"WWW-Authenticate": "Bearer"})
    return found  # type: ignore[no-any-return]


Me = Annotated[User, Depends(current_user)]


def create_app(manager: Manager) -> FastAPI:
    """The ASGI app of the service around ``manager`` (module doc)."""
    app = FastAPI(title="merkat", version="1", openapi_url=f"{PREFIX}/openapi.json",
                  docs_url=f"{PREFIX}/docs", redoc_url=None)
    app.state.manager = manager
    from merkat.service.dbdown import KeyMemory

    app.state.keys_seen = KeyMemory()  # (honoured only while the database fails)
    store = manager.store

    limits = manager.config.limits
    install_errors(app, limits)  # one error shape, body limits (service/http.py)
    install_openapi(app)  # the document says every status and the error shape
    streams = Slots(limits.streams_per_user)  # open event streams per user

    def own_platform(name: str, me: User) -> Any:
        row = store.platform(name)
        if row is None or (row.owner != me.name and not me.admin):
            raise HTTPException(404, f"no platform {name!r}")
        return row

    def own_account(name: str, me: User) -> None:
        if me.admin:
            if not store.ledger.has_account(name):
                raise HTTPException(404, f"no account {name!r}")
            return
        if name not in manager.accounts_of(me.name):
            raise HTTPException(404, f"no account {name!r}")

    r = APIRouter(prefix=PREFIX)

    @r.get("/health", responses={503: {"description": "The period loop is failing (the "
                                                       "reason in `loop.reason`)"}})
    def health(response: Response) -> dict[str, Any]:
        """The server's health, from memory only (it answers while the database fails):
        200 and ``status: ok``, or 503 and ``status: error`` when the period loop fails
        (``loop``: the reason, since when, the retry; :mod:`merkat.service.loop`)."""
        loop = manager.health.as_dict(manager.clock(), manager.config.period)
        if not loop["ok"]:
            response.status_code = 503
        return {"status": "ok" if loop["ok"] else "error", "period": manager.platform.index,
                "enforced": bool(manager.backend.enforced), "loop": loop}

    @r.get("/users/me")
    def me_(me: Me) -> dict[str, Any]:
        return {"name": me.name, "admin": me.admin}

    # --- platforms ---------------------------------------------------------------------------

    @r.post("/platforms", status_code=201)
    async def submit(request: Request, me: Me) -> dict[str, Any]:
        """Submit a template: a JSON object, or YAML / XML text (Content-Type
        application/yaml or application/xml)."""
        body = (await request.body()).decode(errors="replace")
        ctype = request.headers.get("content-type", "")

        def read() -> Any:  # in a thread: a big template does not hold the event loop
            if "json" in ctype:
                try:
                    data = load_json(body, limits)
                except InputError as exc:
                    raise HTTPException(422, f"body: {exc}") from None
                return validate(data, "template")
            return parse(body, "template", "xml" if "xml" in ctype else None, limits)

        try:
            t = await asyncio.to_thread(read)
            row = await asyncio.to_thread(manager.submit, me.name, t)
        except TemplateError as exc:
            raise HTTPException(422, str(exc).removeprefix("template: ")) from None
        except StoreError as exc:
            code = getattr(exc, "status", 409 if "already exists" in str(exc) else 422)
            raise HTTPException(code, str(exc)) from None
        return _platform(row)

    @r.get("/platforms")
    def platforms(me: Me) -> dict[str, Any]:
        """Your platforms (an admin's: all), each with its outcome (``met``, ``missed by N
        s``, ``running: on track``...), deadline and money (docs/service.md, "Status")."""
        rows = store.platforms(None if me.admin else me.name)
        return {"items": [{**_platform(p), **st} for p, st in
                          zip(rows, platforms_status(manager, rows), strict=True)]}

    @r.get("/platforms/{name}")
    def platform(name: str, me: Me) -> dict[str, Any]:
        row = own_platform(name, me)
        out = _platform(row)
        out["template"] = row.template
        out["vms"] = manager.vms(name)
        if isinstance(manager.backend, Suspending):  # kubernetes: what a suspension keeps
            out["suspension"] = manager.backend.suspension(row.template)
        out["spent"] = manager.spent(name)
        out["slo"] = manager.slo(name)
        out.update(platform_status(manager, row, out["slo"]))
        from merkat.service.status import clusters_status

        out["clusters"] = clusters_status(manager, row, out["deadline"])
        return out

    @r.delete("/platforms/{name}")
    def delete(name: str, me: Me) -> dict[str, Any]:
        """Remove an ended platform's record (its bank account and history stay); the name
        can then be submitted again (409 while it has not ended)."""
        own_platform(name, me)
        from merkat.service.records import StillActive, delete_platform

        try:
            return delete_platform(manager, name)
        except NotFound:
            raise HTTPException(404, f"no platform {name!r}") from None
        except StillActive as exc:
            raise HTTPException(409, str(exc)) from None

    @r.post("/platforms/{name}/stop")
    def stop(name: str, me: Me) -> dict[str, Any]:
        own_platform(name, me)
        try:
            manager.stop(name)
        except NotFound:
            raise HTTPException(404, f"no platform {name!r}") from None
        return _platform(store.platform(name))

    @r.post("/platforms/{name}/boost", status_code=201)
    def boost(name: str, body: BoostBody, me: Me) -> dict[str, Any]:
        """Add credits from the owner's account to a platform that has not ended (Tycoon
        §3's boosting); its controller bids the larger budget from the next period on."""
        own_platform(name, me)
        try:
            amount = parse_amount(body.amount, "amount")
            if amount <= 0:
                raise HTTPException(422, "amount: must be > 0")
            return manager.boost(name, amount, user_key(me.name, body.idempotency_key))
        except NotFound:
            raise HTTPException(404, f"no platform {name!r}") from None
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        except IdempotencyConflict:
            raise HTTPException(409, _KEY_REUSED) from None
        except BankError as exc:
            raise HTTPException(422, str(exc)) from None

    @r.get("/platforms/{name}/logs", response_class=PlainTextResponse)
    def logs(name: str, me: Me, tail: Annotated[int, Query(ge=1, le=100_000)] = 100) -> str:
        own_platform(name, me)
        return manager.logs(name, tail)

    @r.post("/platforms/{name}/metrics", status_code=202)
    def metrics(name: str, body: MetricsBody, me: Me) -> dict[str, Any]:
        own_platform(name, me)
        values = {k: float(v) for k, v in body.model_dump().items()
                  if v is not None and k in METRIC_FIELDS}
        manager.push_metrics(name, values)
        return {"accepted": values}

    # --- market ----------------------------------------------------------------------------

    @r.get("/prices")
    async def prices(me: Me) -> dict[str, Any]:
        """The last period's prices (credits per core and per MiB, per period)."""
        last = store.last_price
        return {"time": last["time"], "period": last["period"], "cpu": last["cpu"],
                "memory": last["memory"]}

    @r.get("/prices/history")
    def price_history(me: Me, since: Annotated[float, Query(ge=0, le=1e11)] = 0.0,
                      limit: Annotated[int, Query(ge=1, le=100_000)] = 1000) -> dict[str, Any]:
        return {"items": store.prices(since, limit)}

    @r.get("/nodes")
    def nodes(me: Me) -> dict[str, Any]:
        with manager.lock:
            used: dict[str, dict[str, float]] = {}
            for a in manager.platform.apps.values():
                for vm in a.records():
                    if vm.host >= 0 and vm.state is not VMState.SUSPENDED:  # holds nothing
                        u = used.setdefault(manager.platform.hosts.ids[vm.host],
                                            {"cpu": 0.0, "memory": 0.0})
                        for k in u:
                            u[k] += vm.alloc.get(k, 0.0)
            items = [{"name": n.name, "cpus": n.cpus, "cores": n.cores, "memory": n.memory,
                      **node_capacity(n),
                      "allocated": used.get(n.name, {"cpu": 0.0, "memory": 0.0})}
                     for n in manager.backend.node_list()]
            capacity = manager.backend.capacity if isinstance(manager.backend, Reserving) \
                else None
        return {"items": items, "enforced": bool(manager.backend.enforced),
                "backend": manager.backend.label if isinstance(manager.backend, Labelled)
                else None,
                "warning": "; ".join(w for w in (manager.backend.warning,
                                                 manager.tenants.warning) if w) or None,
                "machine": capacity.as_dict() if capacity is not None else None}

    @r.get("/allocations")
    def allocations(me: Me) -> dict[str, Any]:
        items = []
        with manager.lock:
            names = [a for a in manager.platform.apps if me.admin or
                     manager.platform.apps[a].spec.owner == me.name]
        for name in names:
            for vm in manager.vms(name):
                items.append({"platform": name, "vm": vm["id"], "node": vm["node"],
                              "state": vm["state"], "bid": vm["bid"],
                              "allocation": vm["allocation"]})
        return {"items": items}

    # --- bank ---------------------------------------------------------------------------------

    @r.get("/accounts")
    def accounts(me: Me) -> dict[str, Any]:
        names = ([a.name for a in store.ledger.accounts()] if me.admin
                 else manager.accounts_of(me.name))
        bal = store.ledger.balances(names) if names else {}
        return {"items": [{"name": n, "balance": format_amount(bal[n])} for n in names]}

    @r.get("/accounts/{name}")
    def account(name: str, me: Me) -> dict[str, Any]:
        own_account(name, me)
        return {"name": name, "balance": format_amount(store.ledger.balance(name))}

    @r.get("/accounts/{name}/history")
    def history(name: str, me: Me,
                limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
        own_account(name, me)
        return {"items": [{"id": t.id, "kind": str(t.kind), "from": t.payer, "to": t.payee,
                           "amount": format_amount(t.amount), "reason": t.reason,
                           "period": t.period}
                          for t in store.ledger.history(name, limit)]}

    @r.post("/transfers", status_code=201)
    def transfer(body: TransferBody, me: Me) -> dict[str, Any]:
        own_account(body.source, me)
        if not store.ledger.has_account(body.to):
            raise HTTPException(404, f"no account {body.to!r}")
        try:
            amount = parse_amount(body.amount, "amount")
            t = store.ledger.transfer(body.source, body.to, amount, body.reason,
                                      idempotency_key=user_key(me.name, body.idempotency_key))
        except IdempotencyConflict:
            raise HTTPException(409, _KEY_REUSED) from None
        except BankError as exc:
            raise HTTPException(422, str(exc)) from None
        return {"id": t.id, "from": body.source, "to": body.to,
                "amount": format_amount(t.amount)}

    @r.post("/keys", status_code=201)
    def register_key(body: KeyBody, me: Me) -> dict[str, Any]:
        from merkat.bank import tokens

        try:
            raw = tokens.load_public_key(body.public_key.encode(), "public_key")
            store.ledger.register_key(me.name, raw)
        except BankError as exc:
            raise HTTPException(422, str(exc)) from None
        return {"user": me.name, "key_id": tokens.key_id(raw)}

    @r.post("/transfer-tokens/redeem", status_code=201)
    def redeem(body: TokenBody, me: Me) -> dict[str, Any]:
        from merkat.bank import tokens

        try:
            red = tokens.redeem(store.ledger, body.token)
        except BankError as exc:
            raise HTTPException(422, str(exc)) from None
        return {"transfer_id": red.transfer_id, "sub_account": red.sub_account,
                "identity": red.identity, "amount": format_amount(red.amount)}

    # --- events ------------------------------------------------------------------------------

    @r.get("/events")
    def events(me: Me, after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
               limit: Annotated[int, Query(ge=1, le=1000)] = 100,
               platform: str | None = None,
               tail: Annotated[int | None, Query(ge=1, le=1000)] = None,
               since: Annotated[float | None, Query(ge=0, le=1e11)] = None,
               ) -> dict[str, Any]:
        """Events with id > ``after``, oldest first; ``tail=N``: the newest N instead (the
        dashboard's first load on a long-lived server, ``merkat events``), ``since``: at or
        after that time (Unix s)."""
        owner = None if me.admin else me.name
        if tail is not None:
            items = store.events_tail(tail, owner, platform, since)
            last = items or store.events_tail(1, owner, platform)
            return {"items": items, "next": last[-1]["id"] if last else 0}
        items = store.events(after, limit, owner, platform, since)
        return {"items": items, "next": items[-1]["id"] if items else after}

    @r.get("/events/stream")
    async def stream(request: Request, me: Me,
                     after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
                     poll: Annotated[float, Query(ge=0.05, le=60)] = 0.5) -> StreamingResponse:
        slot = streams.take(me.name)
        if slot is None:
            raise HTTPException(429, f"events/stream: at most {limits.streams_per_user} open "
                                "streams per user (limits.streams_per_user)")

        key = api_key(request) or ""

        async def gen() -> AsyncIterator[str]:
            try:
                last = after
                yield ": merkat events\n\n"
                while not await request.is_disconnected():
                    items = await asyncio.to_thread(store.events, last, 100,
                                                    None if me.admin else me.name)
                    for e in items:
                        last = e["id"]
                        yield f"id: {e['id']}\nevent: {e['kind']}\ndata: {json.dumps(e)}\n\n"
                    if not items:
                        # a key revoked while the stream is open ends it (no stale session)
                        if await asyncio.to_thread(store.user_by_key, key) != me:
                            yield "event: revoked\ndata: {}\n\n"
                            return
                        await asyncio.sleep(poll)
            finally:
                slot.release()

        body = gen()
        weakref.finalize(body, slot.release)  # never iterated (the client left at once)
        return StreamingResponse(body, media_type="text/event-stream")

    app.include_router(r)
    from merkat.service.files_api import file_routes

    app.include_router(file_routes(manager, current_user, PREFIX))  # PUT/GET /files
    return app  # the dashboard and /metrics are mounted by the caller (merkat.web.app)


def node_capacity(n: Any) -> dict[str, Any]:
    """A node's reserved and allocatable CPU and memory (what the market sells; a backend
    without a reserve: all of it)."""
    cpu = getattr(n, "allocatable_cores", n.cores)
    memory = getattr(n, "allocatable_memory", n.memory)
    return {"reserved": {"cpu": round(n.cores - cpu, 6), "memory": round(n.memory - memory, 3)},
            "allocatable": {"cpu": cpu, "memory": memory}}


def _platform(row: Any) -> dict[str, Any]:
    return {"name": row.name, "state": row.state, "owner": row.owner,
            "submitted": row.submitted, "started": row.started, "ended": row.ended,
            "outcome": row.outcome}
