"""Policies by name, so a template or a CLI flag selects one: ``make_policy("deadline-strict")``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from merkat.control.base import Controller
from merkat.control.combined import MerkatCombined
from merkat.control.deadline import HorizontalDeadline, VerticalDeadline
from merkat.control.framework import FrameworkHorizontal
from merkat.control.generic import (
    MerkatHorizontal,
    MerkatVertical,
    ScaleMultiVMsController,
    ScaleOneVMController,
)
from merkat.control.slo import (
    BestEffort,
    DeadlinePartial,
    DeadlineStrict,
    PerformancePartial,
    PerformanceStrict,
)
from merkat.registry import Registry, UnknownName


class PolicyError(ValueError):
    """An unknown policy name or parameter."""


class UnknownPolicy(UnknownName, PolicyError):
    """An unknown policy name (the message lists the known policies)."""


POLICIES: Registry[type[Controller]] = Registry("policy", error=UnknownPolicy)
"""Every policy, by its registry name (``merkat policy list``)."""
for _cls in (ScaleOneVMController, ScaleMultiVMsController, MerkatVertical, MerkatHorizontal,
             MerkatCombined, VerticalDeadline, HorizontalDeadline, DeadlineStrict, DeadlinePartial,
             PerformanceStrict, PerformancePartial, BestEffort, FrameworkHorizontal):
    POLICIES.register(_cls)


def policy_params(name: str) -> dict[str, Any]:
    """The parameters of policy ``name`` and their defaults."""
    return dict(_params(_lookup(name)))


@functools.lru_cache(maxsize=256)
def _params(cls: type[Controller]) -> dict[str, Any]:
    """A class's keyword parameters (read once per class: a simulation makes one controller
    per job)."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_ONLY)
    return {p.name: p.default for p in inspect.signature(cls).parameters.values()
            if p.kind in kinds and p.default is not inspect.Parameter.empty}


def make_policy(name: str, **params: Any) -> Controller:
    """A fresh controller of policy ``name`` with ``params`` (keyword arguments).

    Raises :class:`PolicyError` naming the known policies, or the known parameters.
    """
    cls = _lookup(name)
    known = policy_params(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise PolicyError(f"policy {name!r} has no parameter {', '.join(map(repr, unknown))}; "
                          f"its parameters are: {', '.join(sorted(known)) or 'none'}")
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"policy {name!r}: {exc}") from exc


def _lookup(name: str) -> type[Controller]:
    return POLICIES.get(name)
