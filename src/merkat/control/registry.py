"""Policies by name, so a template or a CLI flag selects one: ``make_policy("deadline-strict")``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
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
from merkat.control.params import ANY, BadValue, Param
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


class ParamError(PolicyError):
    """A policy's parameter ``param`` is refused (unknown, or a value its declaration refuses:
    :mod:`merkat.control.params`); ``str()`` is ``PARAM: REASON``, so a caller prefixes where
    the parameter came from (``controller.params.``, ``--policy-param ``)."""

    def __init__(self, policy: str, param: str, reason: str) -> None:
        super().__init__(f"{param}: {reason}")
        self.policy, self.param, self.reason = policy, param, reason


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


@functools.lru_cache(maxsize=256)
def _schema(cls: type[Controller]) -> dict[str, Param]:
    """Each keyword parameter of ``cls`` and its declaration (``cls.PARAMS``; a parameter a
    plugin's subclass adds without declaring it is not checked)."""
    return {k: cls.PARAMS.get(k, ANY) for k in _params(cls)}


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` of policy ``name`` checked against its declaration (each policy's
    ``PARAMS`` and ``PARAM_RULES``, :mod:`merkat.control.params`), as the policy takes them
    (``3.0`` of an integer parameter as ``3``).

    Raises :class:`UnknownPolicy`, or :class:`ParamError` naming the first parameter refused:
    unknown (with the known ones), of the wrong type or out of range."""
    return _check(_lookup(name), name, params)


def _check(cls: type[Controller], name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    schema = _schema(cls)
    out: dict[str, Any] = {}
    for key, value in params.items():
        spec = schema.get(key)
        if spec is None:
            raise ParamError(name, str(key), _unknown(name, str(key), schema))
        try:
            out[key] = spec.check(value)
        except BadValue as exc:
            raise ParamError(name, key, str(exc)) from None
    for rule in cls.PARAM_RULES:  # (the defaults pass every rule: only one given can fail)
        named = next((k for k in rule.params if k in out), None)
        if named is not None:
            reason = rule.test({**_params(cls), **out}, named)
            if reason is not None:
                raise ParamError(name, named, reason)
    return out


def _unknown(name: str, key: str, schema: Mapping[str, Param]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(schema), 1, 0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"policy {name!r} has no parameter {key!r}{hint}; its parameters are: "
            f"{', '.join(sorted(schema)) or 'none'}")


def make_policy(name: str, **params: Any) -> Controller:
    """A fresh controller of policy ``name`` with ``params`` (keyword arguments), checked
    first (:func:`check_params`).

    Raises :class:`PolicyError` naming the known policies, or :class:`ParamError` naming the
    parameter refused.
    """
    cls = _lookup(name)
    params = _check(cls, name, params)
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:  # a check of the constructor's own
        raise PolicyError(f"policy {name!r}: {exc}") from exc


def _lookup(name: str) -> type[Controller]:
    return POLICIES.get(name)
