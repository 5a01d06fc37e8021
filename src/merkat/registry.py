"""One registry idiom: the things a user selects by name (controller policies, market
mechanisms, economies, charging rules, trace and batch schedulers, live backends,
experiments, CLI nouns).

Contract of :class:`Registry` ``[T]``:

- ``register(name, obj)`` adds ``obj`` under ``name`` and returns it; ``register(obj)`` takes
  the name from ``obj.name``; both are decorators too (``@R.register`` on a class with a
  ``name``, ``@R.register("name")`` on anything). A name is registered once: a second
  registration is a ``ValueError`` (``unregister`` removes one, for tests and plugins).
- ``get(name)`` (and ``R[name]``) returns it or raises the registry's error, always an
  :class:`UnknownName` (a ``ValueError``), whose message names the kind and lists the known
  names, sorted: ``unknown policy 'x'; known: a, b``. A registry may raise a subclass of
  :class:`UnknownName` that is also its domain's error (``PolicyError``...), so callers that
  catch the domain's error keep working.
- ``names()`` (registration order, for ``--help``), ``items()``, ``in``, ``len``, iteration.
- ``entry_points``: a package metadata group (``merkat.backends``) whose entries are
  registered on first use: installed plugins are listed and found like built-in ones.

Pure and light: imports nothing of merkat and nothing heavy, so ``merkat --help`` and the
pure layers (``market/``, ``control/``) may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class UnknownName(ValueError):
    """A name no registry entry has; the message lists the known names."""

    def __init__(self, kind: str, name: object, known: list[str] | tuple[str, ...]) -> None:
        self.kind = kind
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(sorted(self.known))}")


class Registry(Generic[T]):
    """Entries of one kind by name (see the module docstring)."""

    def __init__(self, kind: str, *, error: type[UnknownName] = UnknownName,
                 entry_points: str | None = None) -> None:
        self.kind = kind
        self.error = error
        self.group = entry_points
        self._entries: dict[str, T] = {}
        self._plugins: dict[str, Any] = {}  # entry points found, loaded on first get
        self._plugins_found = entry_points is None

    @overload
    def register(self, name: str, obj: T, /) -> T: ...

    @overload
    def register(self, name: str, /) -> Callable[[T], T]: ...

    @overload
    def register(self, obj: T, /) -> T: ...

    def register(self, name: Any, obj: Any = None, /) -> Any:
        """Add ``obj`` under ``name`` (or under ``obj.name``); see the module docstring."""
        if obj is not None:
            return self._add(name, obj)
        if isinstance(name, str):
            return lambda o: self._add(name, o)
        entry = name
        entry_name = getattr(entry, "name", None)
        if not isinstance(entry_name, str):
            raise TypeError(f"a {self.kind} registered without a name needs a str .name")
        return self._add(entry_name, entry)

    def _add(self, name: str, obj: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (absent: nothing)."""
        self._entries.pop(name, None)
        self._plugins.pop(name, None)

    def get(self, name: str) -> T:
        """The entry ``name``; the registry's :class:`UnknownName` listing the known names."""
        try:
            return self._entries[name]
        except KeyError:
            pass
        self._find_plugins()
        if name in self._plugins:
            self._entries[name] = self._plugins.pop(name).load()
            return self._entries[name]
        raise self.error(self.kind, name, self.names()) from None

    __getitem__ = get

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order (built-in ones, then installed plugins)."""
        self._find_plugins()
        return (*self._entries, *self._plugins)

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        if name in self._entries:
            return True
        self._find_plugins()
        return name in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"

    def _find_plugins(self) -> None:
        if self._plugins_found:
            return
        self._plugins_found = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group or ""):
            if ep.name not in self._entries:
                self._plugins[ep.name] = ep
