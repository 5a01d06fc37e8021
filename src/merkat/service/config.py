"""The server's configuration: YAML file, then environment overrides, then flags.

:class:`ServiceConfig` (pydantic-settings) reads ``MERKAT_*`` variables (nested fields with
``__``: ``MERKAT_RESERVE__CPU=0.01``); :func:`load_config` layers a YAML file under them and
explicit overrides (the ``merkat server`` flags) on top. Defaults are Merkat's: a 40 s period,
a 10 s admission interval, the local backend on one node spanning this machine, and state in
SQLite under the user's data directory (``<data_dir>/merkat.db``); ``db_url`` may name a
PostgreSQL database instead. Bad values raise :class:`ConfigError` naming the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from merkat.defaults import (
    ADMISSION_S,
    CHARGE_BY,
    ECONOMY,
    LIVE_PERIOD_S,
    REDISTRIBUTE_EVERY,
    RESERVE_PRICE,
)
from merkat.service.limits import InputError, LimitsConfig, load_yaml

MAX_CPUS = 1 << 16
"""The most CPUs a cpuset list may name (a bound on what ``backend.nodes`` may write)."""

DEFAULT_RESERVE_CPU = 0.5
"""Cores kept for merkat and the system (``backend.reserve_cpu``; the local backend's
:mod:`merkat.backends.local.capacity` explains the choice)."""
DEFAULT_RESERVE_MEMORY = 512.0
"""MiB kept for merkat and the system (``backend.reserve_memory``)."""

LIVE_ECONOMIES = ("themis", "closed")
"""Economies the live service runs (:data:`merkat.runtime.economy.ECONOMIES`): ``themis``
(renewals minted into the owner's account each period, then moved to the platform, never above
its budget) and ``closed`` (no money enters after the users' budgets: renewals are taken from
what the owner holds, Merkat §4.1.3's credit manager, and every ``redistribute_every`` periods
the Virtual Bank gives the provider's income back to the users in equal parts, grid-cloud
model §3.1)."""
LIVE_CHARGING = ("bid", "use")
"""Charging the live service runs: ``bid`` (each placed VM pays its bid, Merkat §2.2) and
``use`` (the bids are deposited; at the next period each VM pays the CPU its cgroup measured at
the period's price, plus its memory allocation, and the rest is refunded: Tycoon §3)."""


SECONDS = {"period": (0.1, 86400.0), "admission": (0.1, 86400.0)}
"""The range of ``period`` and ``admission`` (s, both ends included): under a tenth of a
second the loop would spin recording periods (or admitting) back to back, over a day the
market would not react (and a period of ``inf`` or ``1e300`` s would never come again)."""


class ConfigError(ValueError):
    """A bad configuration value (the message names the field)."""


def check_seconds(name: str, v: float) -> float:
    """``v`` when it is a finite number of seconds in ``name``'s range (:data:`SECONDS`);
    else ``ValueError`` saying the range (not naming the field: the caller does)."""
    lo, hi = SECONDS[name]
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"must be a number of seconds from {lo:g} to {hi:g}, got {v:g}")
    return v


def cpu_list(cpus: str) -> list[int]:
    """A cpuset list (``"0-1,4"``) as its CPUs, sorted; ``ValueError`` for a range that goes
    down (``"3-1"``) or a list too long to be a machine's."""
    out: set[int] = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"{part}: a range goes up (write {b}-{a})")
        if b - a >= MAX_CPUS or len(out) + b - a >= MAX_CPUS:
            raise ValueError(f"more than {MAX_CPUS} CPUs")
        out.update(range(a, b + 1))
    return sorted(out)


def cpu_ranges(cpus: Iterable[int]) -> str:
    """CPUs written as a cpuset list: ``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    parts: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def machine_cpus() -> list[int]:
    """The CPUs of this machine the server may use (its affinity: what the nodes' cpusets may
    name, :func:`merkat.backends.local.capacity.split_machine`'s CPUs)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


class NodeConfig(BaseModel):
    """A logical node: a cpuset (``cpus``, e.g. "0-1") and ``memory`` MiB."""

    model_config = {"extra": "forbid"}
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    cpus: str = Field(pattern=r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
    memory: float = Field(gt=0)

    @field_validator("cpus")
    @classmethod
    def _cpus_here(cls, v: str) -> str:
        """Only CPUs of this machine: a cpuset naming others is refused by the kernel at each
        VM's start, failing every platform (the server would start, then place nothing)."""
        have = machine_cpus()
        missing = sorted(set(cpu_list(v)) - set(have))
        if missing:
            many = "s" if len(missing) > 1 else ""
            verb = "are" if many else "is"
            raise ValueError(f"CPU{many} {cpu_ranges(missing)} {verb} not on this machine "
                             f"(it has {cpu_ranges(have)})")
        return v

    @field_validator("memory")
    @classmethod
    def _memory_here(cls, v: float) -> float:
        """At most this machine's memory (a finite number of MiB)."""
        from merkat.backends.local.capacity import machine

        have = machine()[1]
        if not v <= have:
            raise ValueError(f"{v:g} MiB is more than this machine has ({have:.0f} MiB)")
        return v


class BackendConfig(BaseModel):
    """Which backend runs the VMs (by registry name) and its nodes (empty: ``split`` nodes
    dividing this machine evenly)."""

    model_config = {"extra": "forbid"}
    name: str = "local"
    nodes: list[NodeConfig] = Field(default_factory=list)
    split: int = Field(1, ge=1, le=1024)
    cgroup_root: Path = Path("/sys/fs/cgroup")
    # "" (the default): merkat-<identity>, unique per data directory (ServiceConfig fills it)
    cgroup_prefix: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$")
    # kept for merkat itself and the system: the VMs together get the rest (Kubernetes'
    # node allocatable; docs/service.md, "The local backend")
    reserve_cpu: float = Field(DEFAULT_RESERVE_CPU, ge=0)  # cores
    reserve_memory: float = Field(DEFAULT_RESERVE_MEMORY, ge=0)  # MiB
    # the VMs' CPU weight against the machine's other processes, in cores (None: their
    # allocatable cores; higher keeps their allocations on a busy machine, at the CLI's cost)
    tree_weight: float | None = Field(None, gt=0, le=2048)
    max_restarts: int = Field(3, ge=0)
    # the kubernetes backend (docs/kubernetes.md): credentials (None: in-cluster, $KUBECONFIG,
    # ~/.kube/config), the namespace of every pod, the image VMs' commands run in, and the
    # label telling this server's pods from others'
    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str = Field("merkat", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    namespace_per_user: bool = False  # merkat-<owner> for each user's pods instead
    image: str = Field("python:3.12-slim", min_length=1)
    instance: str = Field("merkat", pattern=r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$",
                          max_length=63)
    checkpoint_limit_s: float = Field(10.0, gt=0, le=600)  # a state: checkpoint's time at most
    resize_retry_periods: int = Field(3, ge=1, le=1000)  # a Deferred resize is sent again after
    resize_move_periods: int = Field(6, ge=1, le=1000)  # ... and its VM (state:) moved after
    notice_limit_s: float = Field(120.0, ge=0, le=3600)  # a template's notice_s at most (> period)

    @field_validator("reserve_cpu", "reserve_memory")
    @classmethod
    def _reserve_fits(cls, v: float, info: Any) -> float:
        """The reserve must leave this machine's VMs something (local backend)."""
        from merkat.backends.local.capacity import machine

        cores, memory = machine()
        if info.field_name == "reserve_cpu" and v >= cores:
            raise ValueError(f"{v:g} core(s) leaves nothing for the VMs of this "
                             f"{cores:g}-core machine (must be < {cores:g})")
        if info.field_name == "reserve_memory" and v >= memory:
            raise ValueError(f"{v:g} MiB leaves nothing for the VMs of this machine "
                             f"({memory:.0f} MiB)")
        return v


class QuotaConfig(BaseModel):
    """Each user's limits unless an admin set others (``merkat user quota``;
    :mod:`merkat.service.quotas`)."""

    model_config = {"extra": "forbid"}
    platforms: int = Field(20, ge=0)  # platforms that have not ended (queued ... suspended)
    vms: int = Field(200, ge=0)  # VMs of those platforms, in all
    vms_per_platform: int = Field(100, ge=0)  # one platform's VMs, growth included
    template_bytes: int = Field(65536, ge=0)  # a template's size (its stored JSON)


class TenantsConfig(BaseModel):
    """Who users' commands run as and where their files live (docs/service.md, "Tenants and
    isolation"): merkat user number ``id`` (the store's) runs as uid and gid ``uid_base + id``
    (at most ``uid_count`` users), or as the system account ``accounts[user]``; her work area
    is ``<work_root>/<user>`` (default: ``<data_dir>-work`` beside the data directory); each VM
    has ``pids`` processes at most by default, a template may ask up to ``max_pids``; an
    uploaded file is at most ``max_file`` bytes, a user holds at most ``max_files`` of them and
    ``max_files_bytes`` bytes in all (her uploads in progress included)."""

    model_config = {"extra": "forbid"}
    uid_base: int = Field(200_000, ge=1000, le=2**31 - 2**20)
    uid_count: int = Field(100_000, ge=1, le=2**20)
    accounts: dict[str, str] = Field(default_factory=dict)
    work_root: Path | None = None
    pids: int = Field(512, ge=8, le=4_194_304)
    max_pids: int = Field(4096, ge=8, le=4_194_304)
    max_file: int = Field(64 * 2**20, ge=1, le=2**40)
    max_files: int = Field(1000, ge=1, le=10**6)
    max_files_bytes: int = Field(2**30, ge=1, le=2**50)

    @field_validator("accounts")
    @classmethod
    def _accounts(cls, v: dict[str, str]) -> dict[str, str]:
        for user, account in v.items():
            if account in ("root", "0") or not account:
                raise ValueError(f"{user}: a user's commands never run as root")
        return v


class ServiceConfig(BaseSettings):
    """Everything ``merkat server`` needs (module doc)."""

    model_config = SettingsConfigDict(env_prefix="MERKAT_", env_nested_delimiter="__",
                                      extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("merkat")))
    db_url: str | None = None
    period: float = Field(LIVE_PERIOD_S, gt=0)
    admission: float = Field(ADMISSION_S, gt=0)
    reserve: dict[str, float] = Field(
        default_factory=lambda: dict.fromkeys(("cpu", "memory"), RESERVE_PRICE))
    economy: str = ECONOMY
    charging: str = CHARGE_BY
    redistribute_every: int = Field(REDISTRIBUTE_EVERY, ge=1)  # closed economy: the Virtual Bank's K (periods)
    provider: str = "provider"
    backend: BackendConfig = Field(default_factory=BackendConfig)  # type: ignore[arg-type]
    limits: LimitsConfig = Field(default_factory=LimitsConfig)  # type: ignore[arg-type]
    tenants: TenantsConfig = Field(default_factory=TenantsConfig)  # type: ignore[arg-type]
    quotas: QuotaConfig = Field(default_factory=QuotaConfig)  # type: ignore[arg-type]

    @model_validator(mode="after")
    def _prefix(self) -> ServiceConfig:
        if not self.backend.cgroup_prefix:  # each data directory its own subtree
            self.backend.cgroup_prefix = f"merkat-{server_identity(self.data_dir)}"
        return self

    @property
    def identity(self) -> str:
        """This server's identity (:func:`server_identity` of its data directory)."""
        return server_identity(self.data_dir)

    @field_validator("period", "admission")
    @classmethod
    def _seconds(cls, v: float, info: Any) -> float:
        return check_seconds(info.field_name, v)

    @field_validator("reserve")
    @classmethod
    def _reserve(cls, v: dict[str, float]) -> dict[str, float]:
        for r, x in v.items():
            if r not in ("cpu", "memory"):
                raise ValueError(f"unknown resource {r!r} (cpu, memory)")
            if not (x >= 0 and math.isfinite(x)):
                raise ValueError(f"{r} must be a finite number >= 0, got {x:g}")
        return v

    @field_validator("economy")
    @classmethod
    def _known_economies_only(cls, v: str) -> str:
        if v not in LIVE_ECONOMIES:
            raise ValueError(f"the live service runs the economies {', '.join(LIVE_ECONOMIES)}"
                             f", not {v!r}")
        return v

    @field_validator("charging")
    @classmethod
    def _charging(cls, v: str) -> str:
        if v not in LIVE_CHARGING:
            raise ValueError(f"the live service charges by {', '.join(LIVE_CHARGING)}, "
                             f"not {v!r}")
        return v

    @property
    def work_root(self) -> Path:
        """Where the users' work areas are: ``tenants.work_root``, else ``<data_dir>-work``."""
        d = Path(self.data_dir)
        return self.tenants.work_root or d.parent / f"{d.name}-work"

    @property
    def database(self) -> str:
        """The database URL: ``db_url``, else SQLite in ``data_dir``."""
        return self.db_url or f"sqlite:///{self.data_dir / 'merkat.db'}"


def server_identity(data_dir: Path) -> str:
    """A server's identity: 8 hex digits of the SHA-256 of its resolved data directory (one
    server per data directory: :mod:`merkat.service.lock`). It names the default cgroup
    prefix (``merkat-<identity>``) and is carried by every VM (``MERKAT_SERVER``)."""
    import hashlib

    path = str(Path(data_dir).expanduser().resolve())
    return hashlib.sha256(path.encode()).hexdigest()[:8]


def load_config(path: Path | None = None, **overrides: Any) -> ServiceConfig:
    """The configuration from ``path`` (YAML), the environment and ``overrides`` (flags; None
    values are ignored), in increasing priority."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = load_yaml(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config {path}: not a text file") from None
        except InputError as exc:
            raise ConfigError(f"config {path}{exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config {path}: expected a mapping at the top level")
        data = loaded or {}
    try:
        # pydantic-settings gives init kwargs priority over the environment: read the
        # environment first and take from the file only the keys it does not set.
        env_set = ServiceConfig().model_fields_set  # type: ignore[call-arg]
        merged = {k: v for k, v in data.items() if k not in env_set}
        merged.update({k: v for k, v in overrides.items() if v is not None})
        return ServiceConfig(**merged)
    except ValidationError as exc:
        raise ConfigError(f"config: {first_error(exc)}") from None


def first_error(exc: ValidationError) -> str:
    """A pydantic error as one line naming the field: ``clusters.0.cpu: must be > 0``."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(top)"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{loc}: {msg}"
