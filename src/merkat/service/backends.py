"""The backend registry of the live service: a backend by name, built from the config.

A live backend is a :class:`merkat.core.backend.Backend` (what the period asks of the
world) plus what the applications manager needs (:class:`LiveBackend`: register how an
application's VMs start, feed its metrics, reap and restart processes, describe VMs and
nodes). Register a new one with ``BACKENDS.register(name, factory)`` (a
:class:`merkat.registry.Registry`) or the ``merkat.backends`` entry-point group (a callable
``factory(config: ServiceConfig) -> LiveBackend``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from merkat.control.types import Metrics
from merkat.core.backend import Backend, OpReport
from merkat.registry import Registry, UnknownName

if TYPE_CHECKING:
    from merkat.backends.kubernetes.podexec import ExecResult
    from merkat.backends.local.capacity import Allocatable
    from merkat.market import Hosts
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
    monitored: dict[str, str]  # per application, the VM whose end is its end

    def register(self, app: str, launcher: Callable[[str, str, int], Any]) -> None: ...
    def unregister(self, app: str) -> None:
        """Forget what the manager told about ``app`` (its launcher, monitored VM, owner):
        an admission that failed half-way (:func:`merkat.service.tenancy.forget`)."""
        ...
    def set_metrics(self, app: str, metrics: Metrics) -> None: ...
    def poll(self) -> list[Any]: ...
    def describe(self, vm: str) -> dict[str, Any] | None: ...
    def node_list(self) -> Sequence[NodeInfo]: ...
    def log_path(self, vm: str) -> str | None: ...
    def close(self) -> None: ...


# What some live backends can do beyond :class:`LiveBackend`; the manager, recovery and the
# failure and billing rules ask ``isinstance(backend, Adopting)``... (never ``getattr``).


@runtime_checkable
class Adopting(Protocol):
    """Takes its VMs back after the server restarted (:mod:`merkat.service.recovery`)."""

    foreign: list[str]  # another server's VM groups found under our prefix (left alone)

    def adopt(self, vm: str, app: str, host: int, index: int,
              alloc: Mapping[str, float] | None = None) -> OpReport:
        """Know ``vm`` again (op ``adopt``, ``adopt-frozen``, ``adopt-exited``) or start it
        again (op ``restart``); errors are data."""
        ...

    def reap_orphans(self) -> list[str]:
        """Destroy the VMs of a previous run that no platform claimed; their ids."""
        ...


@runtime_checkable
class Failing(Protocol):
    """Says which VMs are gone for good (:mod:`merkat.service.failures`)."""

    def failed(self) -> dict[str, str]:
        """The VMs that cannot run any more, each with the reason."""
        ...


@runtime_checkable
class Listing(Protocol):
    """Lists the VMs it runs (:func:`merkat.service.failures.reconcile` destroys those no
    platform holds)."""

    def vm_ids(self) -> list[str]:
        """Every VM created and not destroyed, sorted."""
        ...


@runtime_checkable
class Refusing(Protocol):
    """Can hold less than the allocation asked (:mod:`merkat.service.applied`)."""

    def unapplied(self) -> dict[str, dict[str, Any]]:
        """Per VM: the resize's state, message and what is short (requested, applied)."""
        ...


@runtime_checkable
class Elastic(Protocol):
    """A cluster whose nodes come and go (Kubernetes): the market sells what is there now."""

    def hosts(self) -> Hosts:
        """The schedulable nodes as last read."""
        ...


@runtime_checkable
class Namespaced(Protocol):
    """Places each user's VMs apart (Kubernetes namespaces): told each platform's owner."""

    owner_of: dict[str, str]


@runtime_checkable
class Remote(Protocol):
    """Runs commands and reads logs inside its VMs (Kubernetes pods): the monitors run there
    (:func:`merkat.service.monitors.read_in_vm`)."""

    def exec_in(self, vm: str, command: str, timeout: float = 5.0) -> ExecResult:
        """``/bin/sh -c command`` inside ``vm``; never raises (the error is in the result)."""
        ...

    def log_text(self, vm: str, tail_lines: int = 1000) -> tuple[str, str | None]:
        """The last lines of ``vm``'s output, and an error or None."""
        ...


@runtime_checkable
class Monitoring(Protocol):
    """Says what a command monitor of a VM runs with on this machine (local backend)."""

    def monitor_context(self, vm: str) -> dict[str, Any] | None:
        """``cwd``, ``env`` and ``cgroup_procs`` of ``vm`` (None: unknown VM)."""
        ...


@runtime_checkable
class Killing(Protocol):
    """Can kill a stalled VM so that its health check restarts it (the heartbeat)."""

    def kill(self, vm: str) -> str | None:
        """Kill ``vm``'s processes and keep it; an error, or None."""
        ...


@runtime_checkable
class PluginGroups(Protocol):
    """Confines the template's plugin commands in a cgroup of their platform."""

    def plugin_cgroups(self, app: str, pids: int | None = None) -> list[str]:
        """The ``cgroup.procs`` files a plugin command of ``app`` joins ([] unenforced)."""
        ...


@runtime_checkable
class Suspending(Protocol):
    """Says what suspending a platform of a template does to its VMs (Kubernetes: the pod
    is deleted; what is kept), for ``platform show``."""

    def suspension(self, template: Mapping[str, Any]) -> dict[str, Any]: ...


@runtime_checkable
class Labelled(Protocol):
    """Names itself in a few words (the banner, ``merkat nodes``)."""

    @property
    def label(self) -> str: ...


@runtime_checkable
class Reserving(Protocol):
    """Sells the machine minus a reserve (local backend): ``GET /nodes``'s ``machine``."""

    capacity: Allocatable


Factory = Callable[["ServiceConfig"], LiveBackend]
BACKENDS: Registry[Factory] = Registry("backend", entry_points=ENTRY_POINTS)
"""The live backends by name (built-in ones, then the installed plugins)."""


def make_backend(config: ServiceConfig) -> LiveBackend:
    """The backend the config names; unknown names raise ``ValueError`` listing the known."""
    try:
        factory = BACKENDS.get(config.backend.name)
    except UnknownName as exc:
        raise ValueError(f"backend.name: {exc}") from None
    return factory(config)


def _local(config: ServiceConfig) -> LiveBackend:
    from merkat.backends.local import LocalBackend, Node, split_machine
    from merkat.backends.local.capacity import Reserve
    from merkat.service.config import cpu_list

    b = config.backend
    nodes = ([Node(n.name, n.cpus, float(len(cpu_list(n.cpus))), n.memory) for n in b.nodes]
             if b.nodes else split_machine(b.split))
    return LocalBackend(nodes, config.data_dir / "logs", cgroup_root=b.cgroup_root,
                        prefix=b.cgroup_prefix, max_restarts=b.max_restarts,
                        reserve=Reserve(b.reserve_cpu, b.reserve_memory, b.tree_weight),
                        identity=config.identity)


def _kubernetes(config: ServiceConfig) -> LiveBackend:
    from merkat.backends.kubernetes.live import from_config

    return from_config(config)


BACKENDS.register("local", _local)
BACKENDS.register("kubernetes", _kubernetes)
