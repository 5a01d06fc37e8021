"""The JSON format of ``merkat market clear``: validation in, plain data out (no file I/O).

Input::

    {"description": "..."?, "hosts": [{"id", "cpu", "memory"}],
     "vms": [{"id", "bid": {"cpu", "memory"}, "max": {"cpu", "memory"},
              "min": {"memory"}?, "host": id | null}],
     "reserve_price": {"cpu", "memory"}?,
     "balance": {"error_threshold", "max_migrations", "tabu_size", "max_no_improve",
                 "rule": "merkat" | "themis"}?}

A ``max`` of ``null`` for a resource means "no cap". Output::

    {"prices": {"cpu", "memory"},
     "vms": [{"id", "host", "ideal": {...}, "allocation": {...}, "error"}],
     "migrations": [{"vm", "from", "to"}]}

A price that is infinite (a resource with zero capacity that someone bids on) and the error of
a VM that could not be placed are written as ``null``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from merkat.market.clear import Clearing
from merkat.market.types import NO_HOST, RESOURCES, BalanceParams, Hosts, MarketError, VMs

MAX_QUANTITY = 1e12
"""Largest number accepted anywhere in a market document (a bid, a capacity, a cap, a price).
With at most :data:`MAX_ITEMS` VMs every sum the clearing forms stays below 1e18: no overflow
to infinity, and prices and shares keep float64's relative precision."""

MAX_ITEMS = 100_000
"""Most hosts, and most VMs, in one document."""

MAX_BYTES = 64 * 2**20
"""Largest market document (bytes)."""

MAX_DEPTH = 20
"""Deepest nesting of arrays/objects accepted (the format itself needs 4)."""

NonNeg = Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResourceAmounts(_Strict):
    cpu: float = NonNeg
    memory: float = NonNeg


class ResourceCaps(_Strict):
    cpu: float | None = Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)
    memory: float | None = Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)


class ResourceMinimum(_Strict):
    cpu: float = Field(default=0.0, ge=0, le=MAX_QUANTITY, allow_inf_nan=False)
    memory: float = Field(default=0.0, ge=0, le=MAX_QUANTITY, allow_inf_nan=False)


class HostSpec(_Strict):
    id: str = Field(min_length=1, max_length=200)
    cpu: float = NonNeg
    memory: float = NonNeg


class VMSpec(_Strict):
    id: str = Field(min_length=1, max_length=200)
    bid: ResourceAmounts
    max: ResourceCaps
    min: ResourceMinimum | None = None
    host: str | None = None


class BalanceSpec(_Strict):
    error_threshold: float = Field(default=0.10, ge=0, le=MAX_QUANTITY, allow_inf_nan=False)
    max_migrations: int = Field(default=BalanceParams.max_migrations, ge=0, le=10**6)
    tabu_size: int = Field(default=BalanceParams.tabu_size, ge=0, le=10**6)
    max_no_improve: int = Field(default=BalanceParams.max_no_improve, ge=0, le=10**6)
    max_iterations: int = Field(default=BalanceParams.max_iterations, ge=0, le=10**7)
    candidates: int = Field(default=BalanceParams.candidates, ge=1, le=10**6)
    rule: Literal["merkat", "themis"] = "merkat"


class MarketSpec(_Strict):
    description: str | None = Field(default=None, max_length=10_000)
    hosts: list[HostSpec] = Field(max_length=MAX_ITEMS)
    vms: list[VMSpec] = Field(max_length=MAX_ITEMS)
    reserve_price: ResourceAmounts | None = None
    balance: BalanceSpec | None = None


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def decode_market(raw: bytes) -> Any:
    """Decode a market document's bytes: at most :data:`MAX_BYTES`, UTF-8, JSON nested at most
    :data:`MAX_DEPTH` deep. Raises :class:`MarketError` saying what is wrong (and where)."""
    if len(raw) > MAX_BYTES:
        raise MarketError("(document)", f"larger than {MAX_BYTES // 2**20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MarketError("(document)", f"not UTF-8 text (byte {exc.start})") from None
    depth = 0
    in_str = escaped = False
    for ch in text:  # nesting checked before parsing: json's recursion never runs out of stack
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise MarketError("(document)", f"nested more than {MAX_DEPTH} levels deep")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MarketError(
            "(document)", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise MarketError("(document)", f"not valid JSON: {str(exc).splitlines()[0]}") from None


def parse_market(data: Any) -> tuple[Hosts, VMs, np.ndarray, BalanceParams]:
    """Validate a decoded JSON document; raise :class:`MarketError` naming the bad field."""
    try:
        spec = MarketSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise MarketError(_loc(tuple(err["loc"])), err["msg"]) from None
    host_ids = tuple(h.id for h in spec.hosts)
    index = {h: i for i, h in enumerate(host_ids)}
    if len(index) != len(host_ids):
        dup = next(h for h in host_ids if host_ids.count(h) > 1)
        raise MarketError("hosts", f"duplicate host id {dup!r}")
    hosts = Hosts(host_ids, np.array([[h.cpu, h.memory] for h in spec.hosts]).reshape(-1, 2))
    host = np.full(len(spec.vms), NO_HOST, dtype=np.int64)
    for i, vm in enumerate(spec.vms):
        if vm.host is not None:
            if vm.host not in index:
                known = ", ".join(host_ids) or "none"
                raise MarketError(f"vms[{i}].host", f"unknown host {vm.host!r} (hosts: {known})")
            host[i] = index[vm.host]
    n = len(spec.vms)
    cap = np.array(
        [[math.inf if c is None else c for c in (vm.max.cpu, vm.max.memory)] for vm in spec.vms]
    ).reshape(n, 2)
    minimum = np.array(
        [[vm.min.cpu, vm.min.memory] if vm.min else [0.0, 0.0] for vm in spec.vms]
    ).reshape(n, 2)
    vms = VMs(
        ids=tuple(vm.id for vm in spec.vms),
        bid=np.array([[vm.bid.cpu, vm.bid.memory] for vm in spec.vms]).reshape(n, 2),
        cap=cap,
        host=host,
        minimum=minimum,
    )
    reserve = (
        np.zeros(2)
        if spec.reserve_price is None
        else np.array([spec.reserve_price.cpu, spec.reserve_price.memory])
    )
    b = spec.balance or BalanceSpec()
    params = BalanceParams(**b.model_dump())
    return hosts, vms, reserve, params


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def clearing_to_dict(hosts: Hosts, vms: VMs, c: Clearing) -> dict[str, Any]:
    """The output document of ``merkat market clear`` (see the module docstring)."""

    def host_id(h: int) -> str | None:
        return None if h == NO_HOST else hosts.ids[h]

    return {
        "prices": {r: _num(c.price[k]) for k, r in enumerate(RESOURCES)},
        "vms": [
            {
                "id": vm_id,
                "host": host_id(int(c.host[i])),
                "ideal": {r: float(c.ideal[i, k]) for k, r in enumerate(RESOURCES)},
                "allocation": {r: float(c.allocation[i, k]) for k, r in enumerate(RESOURCES)},
                "error": _num(c.error[i]),
            }
            for i, vm_id in enumerate(vms.ids)
        ],
        "migrations": [
            {"vm": vms.ids[m.vm], "from": hosts.ids[m.src], "to": hosts.ids[m.dst]}
            for m in c.migrations
        ],
    }
