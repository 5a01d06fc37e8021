"""One seed per run, split into named random streams (``numpy.random.SeedSequence``).

A run (a trace replay, a scenario, one seed of an experiment) takes one integer seed. Every
random draw of the run comes from a *named stream* of that seed, so that what one part draws
never shifts what another draws, and adding a part (an application, a purpose) leaves the
others' draws as they were:

- ``workload`` — the root: ``SeedSequence(seed)`` itself, i.e. exactly the generator
  ``numpy.random.default_rng(seed)`` gives. It feeds the workload's own draws (a trace's
  deadline factors and memory fractions, a Lublin workload, a scenario's task durations), so
  the results quoted before the streams existed did not move (docs/architecture.md,
  "Determinism");
- ``controllers/<application id>`` — one child per application: each controller's generator
  (back-offs, retry delays);
- ``arrivals`` — draws of submission times (jittered arrivals);
- per-purpose names of the experiments, e.g. ``deadline-factors``, ``policies``, ``ties``,
  ``condor-tasks``, ``user/3``, ``window/normal``.

A name is a path of parts separated by ``/``; every other stream is
``SeedSequence(seed, spawn_key=(stable_id(part), ...))``. A part of decimal digits is its
integer, so ``user/3`` is exactly ``stream(seed, "user")``'s sequence's fourth spawned child;
any other part is the first 8 bytes of its SHA-256 (little-endian) — stable across processes
and Python versions, unlike the salted built-in ``hash``. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

WORKLOAD = "workload"
CONTROLLERS = "controllers"
ARRIVALS = "arrivals"


@lru_cache(maxsize=64)
def stable_id(part: str) -> int:
    """The spawn-key entry of one part of a stream's name (see the module docstring)."""
    if not part:
        raise ValueError("a stream name has an empty part")
    if part.isdigit() and part.isascii():
        return int(part)
    return int.from_bytes(hashlib.sha256(part.encode()).digest()[:8], "little")


def _check(seed: int) -> None:
    """ValueError unless ``seed`` is a non-negative integer (not a bool)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"a seed is a non-negative integer, got {seed!r}")


def sequence(seed: int, name: str) -> np.random.SeedSequence:
    """The ``SeedSequence`` of stream ``name`` of a run seeded with ``seed`` (>= 0)."""
    _check(seed)
    if name == WORKLOAD:
        return np.random.SeedSequence(int(seed))
    key = tuple(stable_id(p) for p in name.split("/"))
    return np.random.SeedSequence(int(seed), spawn_key=key)


def stream(seed: int, name: str) -> np.random.Generator:
    """A fresh generator on stream ``name`` of ``seed``: the same arguments, the same draws."""
    return np.random.default_rng(sequence(seed, name))


def controller(seed: int, app_id: str) -> np.random.SeedSequence:
    """The stream of one application's controller (``controllers/<app_id>``)."""
    return sequence(seed, f"{CONTROLLERS}/{app_id}")


class Stream:
    """Stream ``name`` of ``seed``, not made yet: :meth:`sequence` makes its
    ``SeedSequence`` (:func:`sequence`) when it is first needed. A trace replay gives one to
    each job's controller (:func:`controller_stream`), which makes its generator from it on
    its first draw (``Controller.rng``): most controllers never draw, and a ``SeedSequence``
    and its generator cost ~35 µs per job, ~7 s of a 200,000-job trace. The draws are those of
    ``stream(seed, name)`` (``tests/test_seeds.py``)."""

    __slots__ = ("name", "seed")

    def __init__(self, seed: int, name: str) -> None:
        _check(seed)  # (refused at once, as sequence would)
        self.seed, self.name = seed, name

    def sequence(self) -> np.random.SeedSequence:
        """The stream's ``SeedSequence`` (a fresh one each call)."""
        return sequence(self.seed, self.name)

    def __repr__(self) -> str:
        return f"Stream({self.seed!r}, {self.name!r})"


def controller_stream(seed: int, app_id: str) -> Stream:
    """:func:`controller`'s stream, made when the controller first draws (:class:`Stream`)."""
    return Stream(seed, f"{CONTROLLERS}/{app_id}")
