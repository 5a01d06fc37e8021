"""The backend registry of the live service: a backend by name, built from the config.

A live backend is a :class:`merkat.platform.backend.Backend` (what the period asks of the
world) plus what the applications manager needs (:class:`LiveBackend`: register how an
application's VMs start, feed its metrics, reap and restart processes, describe VMs and
nodes). Register a new one with :func:`register` or the ``merkat.backends`` entry-point group
(a callable ``factory(config: ServiceConfig) -> LiveBackend``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from merkat.control.types import Metrics
from merkat.platform.backend import Backend

if TYPE_CHECKING:
    from merkat.service.config import ServiceConfig

ENTRY_POINTS = "merkat.backends"


class NodeInfo(Protocol):
    """What the API shows of a node (:class:`merkat.backends.local.Node` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def cpus(self) -> str: ...
    @property
    def cores(self) -> float: ...
    @property
    def memory(self) -> float: ...


class LiveBackend(Backend, Protocol):
    """A backend the applications manager can drive (see the module doc)."""

    enforced: bool
    warning: str | None

    def register(self, app: str, launcher: Callable[[str, str, int], Any]) -> None: ...
    def set_metrics(self, app: str, metrics: Metrics) -> None: ...
    def poll(self) -> list[Any]: ...
    def describe(self, vm: str) -> dict[str, Any] | None: ...
    def node_list(self) -> Sequence[NodeInfo]: ...
    def log_path(self, vm: str) -> str | None: ...
    def close(self) -> None: ...


Factory = Callable[["ServiceConfig"], LiveBackend]
_REGISTRY: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make backend ``name`` available to ``backend.name`` in the config."""
    _REGISTRY[name] = factory


def make_backend(config: ServiceConfig) -> LiveBackend:
    """The backend the config names; unknown names raise ``ValueError`` listing the known."""
    name = config.backend.name
    factory = _REGISTRY.get(name) or _entry_point(name)
    if factory is None:
        known = sorted(set(_REGISTRY) | _entry_point_names())
        raise ValueError(f"backend.name: unknown backend {name!r}; known: {', '.join(known)}")
    return factory(config)


def _entry_point(name: str) -> Factory | None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name == name:
            f: Factory = ep.load()
            return f
    return None


def _entry_point_names() -> set[str]:
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group=ENTRY_POINTS)}


def _local(config: ServiceConfig) -> LiveBackend:
    from merkat.backends.local import LocalBackend, Node, split_machine
    from merkat.backends.local.capacity import Reserve

    b = config.backend
    nodes = ([Node(n.name, n.cpus, float(_count(n.cpus)), n.memory) for n in b.nodes]
             if b.nodes else split_machine(b.split))
    return LocalBackend(nodes, config.data_dir / "logs", cgroup_root=b.cgroup_root,
                        prefix=b.cgroup_prefix, max_restarts=b.max_restarts,
                        reserve=Reserve(b.reserve_cpu, b.reserve_memory, b.tree_weight),
                        identity=config.identity)


def _count(cpus: str) -> int:
    n = 0
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _kubernetes(config: ServiceConfig) -> LiveBackend:
    from merkat.backends.kubernetes.live import from_config

    return from_config(config)


register("local", _local)
register("kubernetes", _kubernetes)
