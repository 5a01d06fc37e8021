"""What the applications manager's helpers see of it: :class:`ManagerState`.

The helpers of :class:`~merkat.service.manager.Manager` (the period's bookkeeping in
:mod:`.applied`, :mod:`.failures`, :mod:`.money`, :mod:`.deadlines`; the monitors'
:mod:`.probes` and :mod:`.clusters`; the store's views in :mod:`.status` and :mod:`.records`;
the submission rules of :mod:`.quotas` and :mod:`.tenancy`; the period loop :mod:`.loop`) take
the manager as this Protocol, never import it (nor does :mod:`.admit`, which keeps the
per-platform record :class:`Live` defined here): the manager imports them, and none of them
imports the manager (tests/test_import_graph.py). :class:`NotFound` is here too, for the
same reason. A helper that needs a member whose type it
defines itself (the loop's health, the probes' runner) declares it in its own extension of
this Protocol.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from merkat.core.period import Platform
    from merkat.runtime.driver import Driver
    from merkat.service.backends import LiveBackend
    from merkat.service.config import ServiceConfig
    from merkat.service.db import Store
    from merkat.service.monitors import MetricsTracker
    from merkat.service.templates import Template
    from merkat.service.tenants import Tenants


class NotFound(LookupError):
    """No such object (or not the caller's): the API's 404."""


@dataclass
class Live:
    """What the manager keeps per admitted platform (what its controller sees: every cluster's
    reading aggregated, :func:`merkat.service.clusters.platform_metrics`)."""

    template: Template
    owner: str
    tracker: MetricsTracker
    last_poll: float = -math.inf
    state: str = "waiting"  # as last written to the store
    monitor_error: str | None = None  # the last failed reading's (an event when it changes)
    # the other clusters' monitors (Merkat §4.2.1) and the heartbeat: service/clusters.py
    others: dict[str, MetricsTracker] = field(default_factory=dict)
    polled: dict[str, float] = field(default_factory=dict)  # when each was last read
    beats: dict[str, tuple[float, Any]] = field(default_factory=dict)
    errors: dict[str, str | None] = field(default_factory=dict)  # the other clusters' monitors'
    at_risk: str | None = None  # its deadline, as last reported (merkat.service.deadlines)


class ManagerState(Protocol):
    """The manager's state and the two writes its helpers share (module doc)."""

    @property
    def config(self) -> ServiceConfig: ...

    @property
    def store(self) -> Store: ...

    @property
    def backend(self) -> LiveBackend: ...

    @property
    def platform(self) -> Platform: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def live(self) -> dict[str, Live]: ...

    @property
    def ended(self) -> dict[str, Live]: ...

    @property
    def paid(self) -> dict[str, int]: ...

    @property
    def vm_index(self) -> dict[str, int]: ...

    @property
    def saved_vms(self) -> dict[str, tuple[Any, ...]]: ...

    @property
    def tenants(self) -> Tenants: ...

    def _event(self, kind: str, message: str, platform: str | None = None) -> None: ...

    def _sync(self, now: float) -> None: ...
