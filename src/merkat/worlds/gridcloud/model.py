"""The grid-cloud model's fixed data: VM catalog (§4.1 Table 1), clusters (Table 2), tasks and
offers, and the paper's constants (§4.1-§4.3). Pure data, no behaviour beyond checks.

Units: CPU in MI (tasks) and MIPS (speeds), memory in MB, disk in GB, time in seconds, money
in currency units (floats here; the ledger holds micro-credits, see :mod:`.run`).
"""

from __future__ import annotations

from dataclasses import dataclass

MIPS_PER_GHZ = 6000.0
"""§4.1: 1 GHz ≈ 6,000 MIPS."""
GB = 1024.0
"""MB per GB (memory sizes of Table 1/2 are given in GB; the model counts memory in MB)."""
TB = 1024.0
"""GB per TB (disk sizes of Table 2)."""

CPU, MEMORY, DISK = "cpu", "memory", "disk"
RESOURCES = (CPU, MEMORY, DISK)


@dataclass(frozen=True)
class VMType:
    """One entry of a provider's catalog: V^C PEs at V^s MIPS, V^m MB, V^d GB, start time
    V^START (s) and start cost V^COST."""

    name: str
    pes: int
    speed: float
    memory: float
    disk: float
    start_time: float = 1.0
    start_cost: float = 0.0


@dataclass(frozen=True)
class HostSpec:
    """A physical host: ``cpus`` CPUs of ``speed`` MIPS, ``memory`` MB, ``disks`` × ``disk`` GB."""

    cpus: int
    speed: float
    memory: float
    disks: int
    disk: float


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    hosts: int
    host: HostSpec


CATALOG: tuple[VMType, ...] = (
    VMType("normal", 1, 1 * MIPS_PER_GHZ, 1.5 * GB, 160.0),
    VMType("large", 4, 1 * MIPS_PER_GHZ, 7.5 * GB, 850.0),
    VMType("extra-large", 8, 1.5 * MIPS_PER_GHZ, 15 * GB, 1690.0),
)
"""§4.1 Table 1 (start time 1 s, start cost 0, as the paper sets them)."""

CLUSTERS: dict[str, ClusterSpec] = {
    "small": ClusterSpec("small", 4, HostSpec(2, 2 * MIPS_PER_GHZ, 16 * GB, 2, 1 * TB)),
    "standard": ClusterSpec("standard", 5, HostSpec(8, 2 * MIPS_PER_GHZ, 64 * GB, 8, 2 * TB)),
    "powerful": ClusterSpec("powerful", 10, HostSpec(12, 3 * MIPS_PER_GHZ, 96 * GB, 12, 2 * TB)),
}
"""§4.1 Table 2."""


def cluster_of(name: str) -> ClusterSpec:
    """A cluster of :data:`CLUSTERS` by name; ``NAME*K`` is that cluster with K times the
    hosts (for scaling benchmarks). Raises ValueError naming the known clusters."""
    base, _, times = name.partition("*")
    if base not in CLUSTERS:
        raise ValueError(f"cluster: unknown {name!r}; known: {sorted(CLUSTERS)} (or NAME*K)")
    if not times:
        return CLUSTERS[base]
    if not times.isdigit() or int(times) < 1:
        raise ValueError(f"cluster: {name!r}: K in NAME*K must be a positive integer")
    c = CLUSTERS[base]
    return ClusterSpec(name, c.hosts * int(times), c.host)

INITIAL_PRICES: dict[str, float] = {CPU: 100.0, MEMORY: 10_000.0, DISK: 10_000.0}
"""§4.3: 100 per MI, 10,000 per MB and per GB (§4.1 says 1,000; see docs/gridcloud.md)."""
PRICE_PERIOD = 50.0
IDLE_CHECK_PERIOD = 50.0
IDLE_THRESHOLD = 600.0
BANK_PERIOD = 1000.0
RETRY_PERIOD = 500.0
INITIAL_BUDGET = 1e9
MESSAGE_DELAY = 1024 / 1e6
"""§4.2: 1 Kb messages on 1 Mb/s links: 1,024 bits / 10⁶ bit/s per hop."""
MEAN_TASK_MI = 1e6
URGENCY = (0.001, 0.01, 0.1, 10.0, 100.0)
TASK_MEMORY = (10.0, 20.0, 30.0, 40.0, 50.0)
TASK_DISK = (10.0, 20.0, 30.0, 50.0, 60.0, 100.0)
HIGH_SHARE = 0.2
HIGH_IMPORTANCE = (100.0, 50.0)
LOW_IMPORTANCE = (10.0, 5.0)


@dataclass(frozen=True)
class Task:
    """A task of a user: ``cpu`` MI, ``memory`` MB, ``disk`` GB, created at ``created`` with
    deadline ``deadline`` = created + cpu × urgency, and importance I (≥ 0)."""

    id: int
    user: int
    created: float
    cpu: float
    memory: float
    disk: float
    deadline: float
    importance: float
    high: bool


NEW, ACTIVE, IDLE = "new", "active", "idle"
KIND_RANK = {ACTIVE: 0, IDLE: 1, NEW: 2}
"""§3.3.3 energy tie-breaks: an active VM first, then an idle one, a new VM last."""


@dataclass(frozen=True)
class Offer:
    """An allocation offer (A^TIME, A^COST) from one provider (``sed``): ``time`` is the
    duration from when it was computed to the task's end."""

    time: float
    cost: float
    sed: int
