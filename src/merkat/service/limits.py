"""Limits on what a request may cost the server, and the parsers that keep them.

:class:`LimitsConfig` is the ``limits:`` section of the server's configuration (defaults and
meaning in docs/service.md, "Limits"). The parsers here are the only way the service reads
text a user sent:

- :func:`load_yaml` — YAML (templates, the server's config file) through libyaml's event parser
  and a composer that counts: at most ``nodes`` nodes *with every alias expanded* (a 483-byte
  "billion laughs" stops after ``nodes`` nodes, in milliseconds), nested at most ``depth``
  levels (aliases included), no recursive alias. The error is one short line with the line
  number; it never echoes the input.
- :func:`load_json` — JSON refusing ``NaN``, ``Infinity`` and numbers that overflow to infinity
  (``1e400``), and nesting deeper than ``depth``.
- :func:`check_finite` — a parsed value holds only finite numbers (YAML's ``.nan``/``.inf``).

Errors are :class:`InputError` (a ``ValueError``): the message names where, never the input.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, Field

MiB = 1 << 20


class LimitsConfig(BaseModel):
    """The server's limits (config ``limits:``; env ``MERKAT_LIMITS__BODY_BYTES``...)."""

    model_config = {"extra": "forbid"}
    body_bytes: int = Field(MiB, ge=1024, le=1 << 30)
    """A request body: more is refused with 413 before it is read in full."""
    depth: int = Field(32, ge=4, le=500)
    """Nesting of a template or a JSON body (aliases expanded)."""
    yaml_nodes: int = Field(20_000, ge=100, le=10_000_000)
    """Nodes of a YAML document, aliases expanded."""
    event_chars: int = Field(2000, ge=100, le=1 << 20)
    """An event's message (longer ones are cut, marked ``…``)."""
    error_chars: int = Field(500, ge=80, le=1 << 20)
    """An error response's ``detail``."""
    log_bytes: int = Field(8 * MiB, ge=64 << 10)
    """A VM's log: past it, the period loop keeps its newest half."""
    log_read_bytes: int = Field(MiB, ge=4096)
    """What ``GET .../logs`` reads from the end of each VM's log, at most."""
    connections: int = Field(10_000, ge=16)
    """Open HTTP connections (lowered to the process's file limit minus a reserve): past it
    the oldest idle connection is closed."""
    header_timeout: float = Field(10.0, gt=0, le=3600)
    """Seconds a connection has to send a request's head (and its body)."""
    keep_alive: float = Field(5.0, gt=0, le=3600)
    """Seconds an idle keep-alive connection is kept."""
    backlog: int = Field(2048, ge=16, le=65535)
    """The listening socket's backlog."""
    streams_per_user: int = Field(8, ge=1, le=10_000)
    """Open ``GET /events/stream`` responses per user; one more: 429."""


DEFAULT = LimitsConfig.model_validate({})


class Slots:
    """At most ``per_key`` holders per key (a user's open event streams)."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self.held: dict[str, int] = {}

    def take(self, key: str) -> Slot | None:
        """A slot of ``key``, or None when all are held."""
        if self.held.get(key, 0) >= self.per_key:
            return None
        self.held[key] = self.held.get(key, 0) + 1
        return Slot(self, key)


class Slot:
    """One held slot; :meth:`release` is idempotent."""

    def __init__(self, slots: Slots, key: str) -> None:
        self.slots, self.key, self.held = slots, key, True

    def release(self) -> None:
        if self.held:
            self.held = False
            left = self.slots.held.get(self.key, 1) - 1
            if left > 0:
                self.slots.held[self.key] = left
            else:
                self.slots.held.pop(self.key, None)


class InputError(ValueError):
    """Input over a limit or not well formed: one line naming where, not echoing it."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (the cut marked ``…``)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --- YAML ----------------------------------------------------------------------------------


def _loader_class() -> type:
    import yaml
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    base: type
    try:  # libyaml's event parser (fast, no recursion) under PyYAML's composer
        from yaml._yaml import CParser

        class CLoader(Composer, SafeConstructor, Resolver, CParser):  # type: ignore[misc]
            def __init__(self, stream: str) -> None:
                CParser.__init__(self, stream)
                Composer.__init__(self)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)

        base = CLoader
    except ImportError:  # pragma: no cover - PyYAML without libyaml
        base = yaml.SafeLoader

    class Bounded(base):  # type: ignore[misc]
        """Composition with a node budget (module doc)."""

        def __init__(self, stream: str, nodes: int, depth: int) -> None:
            super().__init__(stream)
            self.budget, self.max_depth = nodes, depth
            self.count = 0
            self.level = 0
            self.open: set[str] = set()
            self.sizes: dict[int, tuple[int, int]] = {}

        def _where(self, event: Any) -> str:
            mark = getattr(event, "start_mark", None)
            return f" line {mark.line + 1}" if mark is not None else ""

        def _charge(self, nodes: int, depth: int, event: Any) -> None:
            self.count += nodes
            if self.count > self.budget:
                raise InputError(f"{self._where(event)}: more than {self.budget} nodes "
                                 "(aliases expanded)")
            if depth > self.max_depth:
                raise InputError(f"{self._where(event)}: nested deeper than "
                                 f"{self.max_depth} levels")

        def _size(self, node: Any) -> tuple[int, int]:
            """(nodes, depth) of ``node`` with its aliases expanded (memoized)."""
            got = self.sizes.get(id(node))
            if got is None:
                kids: list[Any] = []
                if isinstance(node.value, list):
                    for item in node.value:
                        kids.extend(item if isinstance(item, tuple) else (item,))
                n, d = 1, 0
                for k in kids:
                    kn, kd = self._size(k)
                    n, d = n + kn, max(d, kd)
                    if n > self.budget:
                        break
                got = self.sizes[id(node)] = (n, d + 1)
            return got

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                if event.anchor in self.open:
                    raise InputError(f"{self._where(event)}: recursive alias "
                                     f"*{clip(event.anchor, 40)}")
                target = self.anchors.get(event.anchor)
                if target is not None:
                    n, d = self._size(target)
                    self._charge(n, self.level + d, event)
                return super().compose_node(parent, index)
            self.level += 1
            self._charge(1, self.level, event)
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                self.open.add(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                self.level -= 1
                if anchor is not None:
                    self.open.discard(anchor)

    return Bounded


_BOUNDED: type | None = None


def compose_yaml(text: str, limits: LimitsConfig = DEFAULT) -> tuple[Any, Any]:
    """``(data, node)``: the one YAML document of ``text`` and its node tree (for line
    numbers), within ``limits``. Raises :class:`InputError` (``" line N: problem"``, to be
    prefixed with the source's name)."""
    import yaml

    global _BOUNDED
    if _BOUNDED is None:
        _BOUNDED = _loader_class()
    loader = _BOUNDED(text, limits.yaml_nodes, limits.depth)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise InputError(f"{where}: not valid YAML ({clip(str(problem), 200)})") from None
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise InputError(": nested too deeply") from None
    finally:
        loader.dispose()
    return data, node


def load_yaml(text: str, limits: LimitsConfig = DEFAULT) -> Any:
    """The one YAML document of ``text``, within ``limits`` (:func:`compose_yaml`)."""
    return compose_yaml(text, limits)[0]


# --- JSON ----------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a number JSON allows (numbers must be finite)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise InputError("a number overflows to infinity (numbers must be finite)")
    return x


def load_json(text: str | bytes, limits: LimitsConfig = DEFAULT) -> Any:
    """JSON ``text`` with finite numbers only, nested at most ``limits.depth`` levels.
    Raises :class:`InputError` (``"not valid JSON: ..."``, ``"nested deeper than ..."``)."""
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except InputError:
        raise
    except RecursionError:
        raise InputError(f"nested deeper than {limits.depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, a too long integer, bad UTF-8
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "bad characters or number"
        raise InputError(f"not valid JSON ({clip(msg, 100)})") from None
    if depth_over(data, limits.depth):
        raise InputError(f"nested deeper than {limits.depth} levels")
    nul = nul_at(data)
    if nul is not None:
        raise InputError(nul_message(nul))
    return data


def nul_at(data: Any, at: tuple[Any, ...] = ()) -> list[Any] | None:
    """Where in ``data`` (dicts, lists, strings) a key or string holds a NUL character (None:
    nowhere). No command, file name, environment or PostgreSQL text can hold one: a template's
    command with one made every period fail (``ValueError: embedded null byte`` from
    ``exec``), a transfer's reason a 503 "database unavailable" on PostgreSQL."""
    if isinstance(data, str):
        return list(at) if "\0" in data else None
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and "\0" in k:
                return [*at, k]
            found = nul_at(v, (*at, k))
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = nul_at(v, (*at, i))
            if found is not None:
                return found
    return None


def nul_message(where: list[Any]) -> str:
    """``FIELD: holds a NUL character (\\0)`` for the place :func:`nul_at` found."""
    field = clip(".".join(str(x) for x in where).replace("\0", "\\0"), 200) or "(top)"
    return f"{field}: holds a NUL character (\\0): no command, file name, environment or " \
        "database text can"


def depth_over(data: Any, limit: int) -> bool:
    """Whether ``data`` (lists and dicts) nests deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, d = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in value if isinstance(v, (list, dict)))
    return False


def check_finite(value: Any, where: str) -> None:
    """Raise :class:`InputError` naming the first non-finite number in ``value`` (``where``
    its path: ``controller.params.t_diff: must be a finite number``)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        v, path = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(f"{path}: must be a finite number")
        if isinstance(v, dict):
            stack.extend((x, f"{path}.{clip(str(k), 60)}") for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{path}.{i}") for i, x in enumerate(v))
