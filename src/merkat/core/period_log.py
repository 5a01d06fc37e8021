"""The platform's period records, kept as columns: :class:`PeriodLog`.

A run keeps one :class:`~merkat.core.model.PeriodRecord` per period (``Platform.records``,
``MarketOutcome.records``): 360,000 of them on the whole HPC2N trace. As objects (a frozen
dataclass with its ``__dict__``, three dicts and boxed numbers) they take ~960 bytes each,
350 MB for that run; as columns they take ~120 bytes each (docs/benchmarks.md, "Memory
at trace scale").

:class:`PeriodLog` is a :class:`~collections.abc.Sequence` of period records that stores
each field in a compact column (``array``: float64 for times, prices and amounts of
resources; the counts and micro-credits as one int32 array of rows, one row a record,
added in one call, widened to int64 then to Python ints as values require) and builds the :class:`PeriodRecord` again when one is read: the record read
back is equal, field for field and bit for bit (a float is stored as the same IEEE double,
sign of zero and NaN payload included), to the one appended. A record the columns cannot
hold exactly (resource dicts whose keys differ from the first record's, a value that is not
a ``float``, an amount that is not an ``int``) is kept whole, as given. The refusal, failure
and unpaid tuples are kept only where they are not empty.

Reading a record costs one object per read; :meth:`PeriodLog.column` reads one field of
every record at once, without building them. ``tests/test_memory_bounded.py`` pins the round
trip.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from operator import itemgetter
from typing import Any, overload

from merkat.core.model import PeriodRecord

_DICTS = ("prices", "allocated", "capacity")
_TUPLES = ("refused", "failed", "unpaid")
_FLOATS = ("time",)
_INTS = tuple(f.name for f in fields(PeriodRecord)
              if f.name not in (*_DICTS, *_TUPLES, *_FLOATS))


_WIDTH = len(_INTS)
_INT_FIELDS = itemgetter(*_INTS)  # a record's int fields, as a tuple in _INTS' order
_ONLY_INT = {int}


class _IntRows:
    """The int fields of every record, row after row (:data:`_INTS`' order) in one
    ``array``: int32 while every value fits, then int64, then a list of Python ints. A row
    is added in one call (this replaces one column per field, appended field by field)."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: array[int] | list[int] = array("i")

    def add(self, row: tuple[int, ...]) -> None:
        data = self.data
        n = len(data)
        try:
            data.extend(row)
        except OverflowError:  # (a value too wide: what was added of the row goes, widened)
            del data[n:]
            self.data = array("q", data) if isinstance(data, array) and data.typecode == "i" \
                else list(data)
            self.add(row)

    def row(self, i: int) -> Sequence[int]:
        return self.data[i * _WIDTH:(i + 1) * _WIDTH]

    def column(self, name: str) -> list[int]:
        part = self.data[_INTS.index(name)::_WIDTH]
        return part.tolist() if isinstance(part, array) else part


class PeriodLog(Sequence[PeriodRecord]):
    """Period records as columns (see the module docstring): ``append``, ``len``, indexing
    (negative indices and slices, a slice giving a list), iteration, ``==`` against any
    sequence of records."""

    def __init__(self, records: Iterable[PeriodRecord] = ()) -> None:
        self._n = 0
        self._floats = {name: array("d") for name in _FLOATS}
        self._ints = _IntRows()
        self._keys: tuple[str, ...] | None = None  # the resource dicts' keys, in order
        self._dicts: dict[str, list[array[float]]] = {}
        self._tuples: dict[str, dict[int, tuple[str, ...]]] = {name: {} for name in _TUPLES}
        self._whole: dict[int, PeriodRecord] = {}  # records the columns cannot hold
        for r in records:
            self.append(r)

    def __len__(self) -> int:
        return self._n

    def _fits(self, values: dict[str, Any]) -> bool:
        """Whether the columns hold the record whose fields are ``values`` exactly."""
        keys = self._keys
        if keys is None:
            keys = tuple(values["prices"])
        for name in _DICTS:
            d = values[name]
            if d.__class__ is not dict or tuple(d) != keys:
                return False
            for v in d.values():
                if v.__class__ is not float:
                    return False
        if values["time"].__class__ is not float:
            return False
        return set(map(type, _INT_FIELDS(values))) == _ONLY_INT  # (a bool is not an int)

    def append(self, r: PeriodRecord) -> None:
        """Keep ``r`` (reading it back gives an equal record)."""
        i = self._n
        values = vars(r)
        if not self._fits(values):
            self._whole[i] = r
            self._append_blank()
            return
        if self._keys is None:
            self._keys = tuple(r.prices)
            self._dicts = {name: [array("d", [0.0] * i) for _ in self._keys]
                           for name in _DICTS}
        for name, cols in self._dicts.items():
            for col, v in zip(cols, values[name].values(), strict=True):
                col.append(v)
        self._floats["time"].append(r.time)
        self._ints.add(_INT_FIELDS(values))
        for name in _TUPLES:
            t = values[name]
            if t:
                self._tuples[name][i] = t
        self._n += 1

    def _append_blank(self) -> None:
        """Placeholder values in every column for a record kept whole."""
        for fcol in self._floats.values():
            fcol.append(0.0)
        self._ints.add((0,) * _WIDTH)
        for cols in self._dicts.values():
            for c in cols:
                c.append(0.0)
        self._n += 1

    def _record(self, i: int) -> PeriodRecord:
        whole = self._whole.get(i)
        if whole is not None:
            return whole
        keys = self._keys
        assert keys is not None
        values: dict[str, Any] = dict(zip(_INTS, self._ints.row(i), strict=True))
        values["time"] = self._floats["time"][i]
        for name in _DICTS:
            values[name] = {k: c[i] for k, c in zip(keys, self._dicts[name], strict=True)}
        for name in _TUPLES:
            values[name] = self._tuples[name].get(i, ())
        return PeriodRecord(**values)

    @overload
    def __getitem__(self, i: int) -> PeriodRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[PeriodRecord]: ...

    def __getitem__(self, i: int | slice) -> PeriodRecord | list[PeriodRecord]:
        if isinstance(i, slice):
            return [self._record(k) for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("period record index out of range")
        return self._record(i)

    def __iter__(self) -> Iterator[PeriodRecord]:
        for i in range(self._n):
            yield self._record(i)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != self._n:
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # (mutable, like a list)

    def __repr__(self) -> str:
        return f"PeriodLog({self._n} records)"

    def column(self, name: str, key: str | None = None) -> list[Any]:
        """Field ``name`` of every record in order (``key``: one resource of a dict field,
        e.g. ``column("allocated", "cpu")``), without building the records."""
        if self._whole or (name not in (*_FLOATS, *_INTS) and key is None):
            return [getattr(r, name) if key is None else getattr(r, name)[key] for r in self]
        if key is not None:
            if name not in _DICTS:
                raise ValueError(f"{name!r} is not a resource field")
            if self._keys is None:
                return []
            return self._dicts[name][self._keys.index(key)].tolist()
        col = self._floats.get(name)
        if col is not None:
            return col.tolist()
        return self._ints.column(name)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its columns (a piece of a cut run sends its records this way)."""
        state = {"n": self._n, "floats": self._floats,
                 "ints": self._ints.data,
                 "keys": self._keys, "dicts": self._dicts, "tuples": self._tuples,
                 "whole": self._whole}
        return (_rebuild, (state,))

    @classmethod
    def concat(cls, parts: Sequence[tuple[Sequence[PeriodRecord], int]]) -> PeriodLog:
        """The records of each ``(records, first)`` in ``parts`` from position ``first`` on,
        one after the other, renumbered from 0 (the pieces of a cut run,
        :mod:`merkat.worlds.merkat.parallel`)."""
        from dataclasses import replace

        out = cls()
        for records, first in parts:
            for k in range(first, len(records)):
                r, n = records[k], len(out)
                out.append(r if r.index == n else replace(r, index=n))
        return out


def _rebuild(state: dict[str, Any]) -> PeriodLog:
    log = PeriodLog()
    log._n = state["n"]
    log._floats = state["floats"]
    log._ints.data = state["ints"]
    log._keys = state["keys"]
    log._dicts = state["dicts"]
    log._tuples = state["tuples"]
    log._whole = state["whole"]
    return log


def max_allocated(records: Sequence[PeriodRecord], resource: str = "cpu") -> float:
    """The most of ``resource`` allocated in any period (0 without periods)."""
    if isinstance(records, PeriodLog):
        return max(records.column("allocated", resource), default=0.0)
    return max((r.allocated[resource] for r in records), default=0.0)


__all__ = ["PeriodLog", "max_allocated"]
