"""Prometheus metrics of a running market (``GET /metrics``), with prometheus-client.

Naming follows Prometheus' rules: the ``merkat_`` prefix, base units (cores for CPU, bytes for
memory, seconds, credits), ``_total`` counters. Labels carry a resource, its unit, a node or a
state; never a user or platform id (those belong in the API, not in time-series labels).

Fed once per scheduling period by :meth:`MarketMetrics.observe` with the period's
:class:`~merkat.core.period.PeriodRecord` and a :class:`MarketSnapshot` of the state after
it (:func:`snapshot_of` builds one from a :class:`~merkat.core.period.Platform`). Gauges are
served from the latest snapshot, swapped in one assignment, so a scrape never sees half a
period. Each :class:`MarketMetrics` owns its registry: two servers (or tests) in one process do
not share series.

=========================================  =========  =========================================
metric                                     type       labels / meaning
=========================================  =========  =========================================
merkat_price_credits                       gauge      resource, unit: credits per unit per period
merkat_allocated                           gauge      resource, unit: allocated, whole cluster
merkat_capacity                            gauge      resource, unit: capacity, whole cluster
merkat_node_allocated                      gauge      node, resource, unit
merkat_node_capacity                       gauge      node, resource, unit
merkat_node_vms                            gauge      node: VMs on the node, not suspended
merkat_vms                                 gauge      state: VMs by state (booting, running...)
merkat_platforms                           gauge      state: platforms (applications) by state
merkat_last_period_timestamp_seconds       gauge      when the last period ran (platform clock)
merkat_periods_total                       counter    scheduling periods run
merkat_credits_charged_total               counter    credits charged to platforms
merkat_admissions_total                    counter    platforms admitted
merkat_vm_creations_total                  counter    VMs created
merkat_vm_destructions_total               counter    VMs destroyed
merkat_migrations_total                    counter    VM migrations
merkat_suspends_total                      counter    VM suspends
merkat_resumes_total                       counter    VM resumes
merkat_period_duration_seconds             histogram  wall time of one period's work
=========================================  =========  =========================================
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from merkat.defaults import MICRO

if TYPE_CHECKING:
    from merkat.core.period import PeriodRecord, Platform

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MIB = 1024 * 1024
# Resource -> (unit, factor from the market's unit to the base unit): the market counts
# memory in MiB, Prometheus wants bytes.
UNITS: dict[str, tuple[str, float]] = {"cpu": ("cores", 1.0), "memory": ("bytes", float(MIB))}
PERIOD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _unit(resource: str) -> tuple[str, float]:
    return UNITS.get(resource, ("units", 1.0))


@dataclass(frozen=True)
class NodeUse:
    """One node after a period: its id, capacity and allocation (market units: cores, MiB)
    and the number of VMs placed on it."""

    node: str
    capacity: Mapping[str, float]
    allocated: Mapping[str, float]
    vms: int


@dataclass(frozen=True)
class MarketSnapshot:
    """The market's state after a period, as the gauges show it (market units)."""

    time: float
    prices: Mapping[str, float]
    allocated: Mapping[str, float]
    capacity: Mapping[str, float]
    nodes: tuple[NodeUse, ...] = ()
    vms_by_state: Mapping[str, int] = field(default_factory=dict)
    platforms_by_state: Mapping[str, int] = field(default_factory=dict)


def snapshot_of(platform: Platform, record: PeriodRecord) -> MarketSnapshot:
    """The snapshot of ``platform`` right after it returned ``record``.

    Per node: VMs with a host count on it, but a suspended VM holds nothing (its state is
    saved, its processes frozen or gone); allocations are the VMs' enforced allocations.
    Platforms by state count every application the platform knows (ended ones too: their
    state is ``finished`` or ``stopped``). Every VM and platform state appears, with 0 when
    none is in it, so a series does not vanish between scrapes.
    """
    from merkat.control.types import VMState
    from merkat.core.period import AppStatus

    hosts = platform.hosts
    resources = list(record.capacity)
    alloc = [{r: 0.0 for r in resources} for _ in hosts.ids]
    count = [0] * len(hosts.ids)
    vms: Tally[str] = Tally({s.value: 0 for s in VMState})
    apps: Tally[str] = Tally({s.value: 0 for s in AppStatus})
    for app in platform.apps.values():
        apps[app.status.value] += 1
        for vm in app.records():
            vms[vm.state.value] += 1
            if 0 <= vm.host < len(count) and vm.state is not VMState.SUSPENDED:
                count[vm.host] += 1
                for r, v in vm.alloc.items():
                    if r in alloc[vm.host]:
                        alloc[vm.host][r] += v
    nodes = tuple(
        NodeUse(
            node=str(hid),
            capacity={r: float(hosts.capacity[h, k]) for k, r in enumerate(resources)},
            allocated=alloc[h],
            vms=count[h],
        )
        for h, hid in enumerate(hosts.ids)
    )
    return MarketSnapshot(
        time=record.time,
        prices=dict(record.prices),
        allocated=dict(record.allocated),
        capacity=dict(record.capacity),
        nodes=nodes,
        vms_by_state=dict(vms),
        platforms_by_state=dict(apps),
    )


class _Gauges(Collector):
    """The gauges, read from the latest snapshot at scrape time."""

    def __init__(self) -> None:
        self.snapshot: MarketSnapshot | None = None

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        price = GaugeMetricFamily(
            "merkat_price_credits",
            "Current market price: credits per unit of the resource per scheduling period.",
            labels=["resource", "unit"],
        )
        allocated = GaugeMetricFamily(
            "merkat_allocated", "Allocated to VMs, whole cluster.", labels=["resource", "unit"]
        )
        capacity = GaugeMetricFamily(
            "merkat_capacity", "Capacity, whole cluster.", labels=["resource", "unit"]
        )
        node_alloc = GaugeMetricFamily(
            "merkat_node_allocated",
            "Allocated to VMs on a node.",
            labels=["node", "resource", "unit"],
        )
        node_cap = GaugeMetricFamily(
            "merkat_node_capacity", "Capacity of a node.", labels=["node", "resource", "unit"]
        )
        node_vms = GaugeMetricFamily(
            "merkat_node_vms", "VMs on a node (suspended ones hold nothing).", labels=["node"]
        )
        vms = GaugeMetricFamily("merkat_vms", "VMs by state.", labels=["state"])
        platforms = GaugeMetricFamily(
            "merkat_platforms", "Virtual platforms (applications) by state.", labels=["state"]
        )
        last = GaugeMetricFamily(
            "merkat_last_period_timestamp_seconds",
            "Time of the last scheduling period (platform clock, seconds).",
        )
        if s is not None:
            for r, v in s.prices.items():
                unit, factor = _unit(r)
                price.add_metric([r, unit], v / factor)  # per base unit
            for family, values in ((allocated, s.allocated), (capacity, s.capacity)):
                for r, v in values.items():
                    unit, factor = _unit(r)
                    family.add_metric([r, unit], v * factor)
            for n in s.nodes:
                for family, values in ((node_alloc, n.allocated), (node_cap, n.capacity)):
                    for r, v in values.items():
                        unit, factor = _unit(r)
                        family.add_metric([n.node, r, unit], v * factor)
                node_vms.add_metric([n.node], n.vms)
            for state, k in sorted(s.vms_by_state.items()):
                vms.add_metric([state], k)
            for state, k in sorted(s.platforms_by_state.items()):
                platforms.add_metric([state], k)
            last.add_metric([], s.time)
        yield from (price, allocated, capacity, node_alloc, node_cap, node_vms, vms, platforms)
        yield last


class MarketMetrics:
    """The Prometheus metrics of one market, in their own registry (see the module table)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges = _Gauges()
        self.registry.register(self._gauges)
        r = self.registry
        self.periods = Counter("merkat_periods", "Scheduling periods run.", registry=r)
        self.charged = Counter(
            "merkat_credits_charged", "Credits charged to platforms for their VMs.", registry=r
        )
        self.admissions = Counter("merkat_admissions", "Platforms admitted.", registry=r)
        self.creations = Counter("merkat_vm_creations", "VMs created.", registry=r)
        self.destructions = Counter("merkat_vm_destructions", "VMs destroyed.", registry=r)
        self.migrations = Counter("merkat_migrations", "VM migrations.", registry=r)
        self.suspends = Counter("merkat_suspends", "VM suspends.", registry=r)
        self.resumes = Counter("merkat_resumes", "VM resumes.", registry=r)
        self.period_duration = Histogram(
            "merkat_period_duration_seconds",
            "Wall time of one scheduling period's work (decide, clear, apply, charge).",
            buckets=PERIOD_BUCKETS,
            registry=r,
        )
        self._known_apps = 0

    @property
    def snapshot(self) -> MarketSnapshot | None:
        return self._gauges.snapshot

    def observe(
        self, record: PeriodRecord, snapshot: MarketSnapshot, duration_s: float | None = None
    ) -> None:
        """Count one period (``record``) and show ``snapshot``; ``duration_s`` is the wall time
        the period took (not observed when None)."""
        self.periods.inc()
        self.charged.inc(record.charged / MICRO)
        self.creations.inc(record.created)
        self.destructions.inc(record.destroyed)
        self.migrations.inc(record.migrations)
        self.suspends.inc(record.suspended)
        self.resumes.inc(record.resumed)
        if duration_s is not None:
            self.period_duration.observe(duration_s)
        self._gauges.snapshot = snapshot

    def observe_platform(
        self, platform: Platform, record: PeriodRecord, duration_s: float | None = None
    ) -> None:
        """:meth:`observe` with the snapshot of ``platform``; platforms it has admitted since
        the last call (its applications only grow) count as admissions."""
        admitted = len(platform.apps) - self._known_apps
        if admitted > 0:
            self.admissions.inc(admitted)
        self._known_apps = len(platform.apps)
        self.observe(record, snapshot_of(platform, record), duration_s)

    def admitted(self, n: int = 1) -> None:
        """Count ``n`` admissions made outside :meth:`observe_platform`."""
        self.admissions.inc(n)
        self._known_apps += n

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format (serve with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
