"""cgroup v1 and v2 behind one interface: a VM's CPU quota, memory limit, cpuset and freezer.

A :class:`CgroupTree` manages the groups under one *prefix* (``merkat`` by default) below a
cgroup mount *root* (``/sys/fs/cgroup`` normally; a plain directory in unit tests, which then
play the kernel's part by pre-creating the control files). :func:`detect` tells which
hierarchy a root holds:

- **v1** (one mount per controller: ``cpu/``, ``cpuacct/``, ``memory/``, ``cpuset/``,
  ``freezer/``): CPU as ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, memory as
  ``memory.limit_in_bytes``, pinning as ``cpuset.cpus``/``cpuset.mems``, suspension as
  ``freezer.state`` (FROZEN/THAWED), the CPU used as ``cpuacct.usage`` (ns);
- **v2** (one unified tree, ``cgroup.controllers`` at its root): ``cpu.max`` ("quota period"),
  ``memory.max``, ``cpuset.cpus``/``cpuset.mems``, ``cgroup.freeze`` (1/0), the CPU used as
  ``cpu.stat``'s ``usage_usec``.

Every operation returns ``None`` on success or a one-line error string (errors from the world
are data); nothing here raises on an OS error. A group's *path* (what the API shows as a VM's
``cgroup``) is relative to the cpu controller's root, e.g. ``merkat/alice-solver/vm1``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

CFS_PERIOD_US = 100_000
"""The CFS period we set (100 ms, the kernel's default)."""
MIN_QUOTA_US = 1_000
"""The kernel refuses quotas under 1 ms."""


class Version(StrEnum):
    v1 = "v1"
    v2 = "v2"


def detect(root: Path) -> Version | None:
    """The cgroup hierarchy mounted at ``root``: v2 (unified: ``cgroup.controllers`` at the
    root), v1 (a ``cpu`` controller directory), or None (no usable cgroups)."""
    if (root / "cgroup.controllers").is_file():
        return Version.v2
    if (root / "cpu" / "cgroup.procs").is_file() or (root / "cpu,cpuacct" / "cgroup.procs").is_file():
        return Version.v1
    return None


@dataclass(frozen=True)
class Limits:
    """What a group is allowed: ``cpu`` cores (None: unlimited), ``memory`` MiB (None:
    unlimited), ``cpus`` a cpuset list such as ``"0-1"`` (None: inherit)."""

    cpu: float | None = None
    memory: float | None = None
    cpus: str | None = None


@dataclass
class CgroupTree:
    """The merkat groups under ``root``/<controller>/``prefix`` (v1) or ``root``/``prefix`` (v2)."""

    root: Path = Path("/sys/fs/cgroup")
    prefix: str = "merkat"
    version: Version | None = None
    _v1_dirs: dict[str, Path] = field(default_factory=dict, repr=False)
    _dirs: dict[str, dict[str, Path]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.version is None:
            self.version = detect(self.root)
        if self.version is Version.v1:
            for ctl in ("cpu", "cpuacct", "memory", "cpuset", "freezer", "pids"):
                for name in (ctl, "cpu,cpuacct" if ctl in ("cpu", "cpuacct") else ctl):
                    if (self.root / name).is_dir():
                        self._v1_dirs[ctl] = self.root / name
                        break

    @property
    def enforced(self) -> bool:
        """Whether limits are really enforced (a cgroup hierarchy we can write to)."""
        if self.version is None:
            return False
        base = self._v1_dirs.get("cpu") if self.version is Version.v1 else self.root
        return base is not None and os.access(base, os.W_OK)

    def controllers(self) -> tuple[str, ...]:
        """The controllers available (v1: mounted; v2: listed in ``cgroup.controllers``)."""
        if self.version is Version.v1:
            return tuple(sorted(self._v1_dirs))
        if self.version is Version.v2:
            text = _read(self.root / "cgroup.controllers") or ""
            return tuple(sorted(set(text.split()) & {"cpu", "memory", "cpuset", "freezer",
                                                      "pids"}))
        return ()

    # --- paths -------------------------------------------------------------------------

    def path(self, name: str) -> str:
        """The group's path relative to the cpu controller's root."""
        return f"{self.prefix}/{name}" if name else self.prefix

    def dirs(self, name: str) -> dict[str, Path]:
        """The group's directory per controller (v2: the one unified directory); memoised."""
        got = self._dirs.get(name)
        if got is None:
            got = self._dirs[name] = self._make_dirs(name)
        return got

    def _make_dirs(self, name: str) -> dict[str, Path]:
        rel = self.path(name)
        if self.version is Version.v1:
            return {ctl: base / rel for ctl, base in self._v1_dirs.items()}
        if self.version is Version.v2:
            return {"unified": self.root / rel}
        return {}

    # --- life --------------------------------------------------------------------------

    def create(self, name: str) -> str | None:
        """Make the group (and the prefix). v2: enable cpu/memory/cpuset in the parents."""
        if self.version is None:
            return "no cgroup hierarchy"
        try:
            if self.version is Version.v2:
                parts = self.path(name).split("/")
                cur = self.root
                for part in parts:
                    _enable_v2(cur)
                    cur = cur / part
                    cur.mkdir(exist_ok=True)
            else:
                for ctl, d in self.dirs(name).items():
                    d.mkdir(parents=True, exist_ok=True)
                    if ctl == "cpuset":  # a v1 cpuset group starts empty: inherit the parent's
                        _inherit_cpuset(self._v1_dirs["cpuset"], d)
        except OSError as exc:
            return f"cannot create cgroup {self.path(name)}: {exc.strerror or exc}"
        return None

    def add(self, name: str, pid: int) -> str | None:
        """Move process ``pid`` into the group (every controller)."""
        for d in self.dirs(name).values():
            err = _write(d / "cgroup.procs", str(pid))
            if err:
                return err
        return None

    def pids(self, name: str) -> list[int]:
        """The processes in the group (from the cpu controller's, or the unified, directory)."""
        d = self._main_dir(name)
        text = _read(d / "cgroup.procs") if d else None
        return [pid for pid in map(int, (text or "").split()) if pid > 0]  # never "0": us

    def remove(self, name: str, grace: float = 2.0) -> str | None:
        """Kill every process of the group (thawing it first), wait, then remove its
        directories. The SIGKILL round freezes the group while it signals, again until it is
        empty, so a fork bomb (bounded by ``pids.max``) cannot outrun it."""
        self.thaw(name)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + grace
            while True:
                if sig == signal.SIGKILL:
                    self.freeze(name)
                for pid in self.pids(name):
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
                if sig == signal.SIGKILL:
                    self.thaw(name)
                if sig == signal.SIGTERM or not self._live(name) or \
                        time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
            while self._live(name) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not self._live(name):
                break
        errors = []
        for d in self.dirs(name).values():
            if d.is_dir():
                try:
                    d.rmdir()
                except OSError as exc:
                    errors.append(f"cannot remove {d}: {exc.strerror or exc}")
        return "; ".join(errors) or None

    def _live(self, name: str) -> bool:
        return any(pid_alive(pid) for pid in self.pids(name))

    def exists(self, name: str) -> bool:
        d = self._main_dir(name)
        return d is not None and d.is_dir()

    # --- limits ------------------------------------------------------------------------

    def set_limits(self, name: str, limits: Limits) -> str | None:
        """Write the CPU quota, memory limit and cpuset of the group."""
        errors = [e for e in (self._set_cpu(name, limits.cpu),
                              self._set_memory(name, limits.memory),
                              self._set_cpus(name, limits.cpus)) if e]
        return "; ".join(errors) or None

    def limits(self, name: str) -> Limits:
        """The limits the kernel holds now (None where unlimited or unreadable)."""
        d = self.dirs(name)
        cpu = memory = None
        cpus = None
        if self.version is Version.v1:
            quota = _read(d["cpu"] / "cpu.cfs_quota_us") if "cpu" in d else None
            period = _read(d["cpu"] / "cpu.cfs_period_us") if "cpu" in d else None
            if quota and period and int(quota) > 0:
                cpu = int(quota) / int(period)
            mem = _read(d["memory"] / "memory.limit_in_bytes") if "memory" in d else None
            if mem and int(mem) < 2**62:
                memory = int(mem) / 2**20
            cpus = _read(d["cpuset"] / "cpuset.cpus") if "cpuset" in d else None
        elif self.version is Version.v2:
            u = d["unified"]
            text = _read(u / "cpu.max")
            if text and not text.startswith("max"):
                q, p = text.split()
                cpu = int(q) / int(p)
            mem = _read(u / "memory.max")
            if mem and mem != "max":
                memory = int(mem) / 2**20
            cpus = _read(u / "cpuset.cpus")
        return Limits(cpu, memory, cpus or None)

    def _set_cpu(self, name: str, cores: float | None) -> str | None:
        quota = -1 if cores is None else max(MIN_QUOTA_US, round(cores * CFS_PERIOD_US))
        d = self.dirs(name)
        # The allocation is a guarantee as well as a cap: the group's weight follows it (the
        # kernel's default weight is one core's worth: 1024 shares, cpu.weight 100).
        cores = 1.0 if cores is None else cores
        if self.version is Version.v1:
            if "cpu" not in d:
                return None
            shares = max(2, min(262_144, round(cores * 1024)))
            return (_write(d["cpu"] / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                    or _write(d["cpu"] / "cpu.cfs_quota_us", str(quota))
                    or _write_if_exists(d["cpu"] / "cpu.shares", str(shares)))
        if self.version is Version.v2:
            value = "max" if quota < 0 else str(quota)
            weight = max(1, min(10_000, round(cores * 100)))
            return (_write(d["unified"] / "cpu.max", f"{value} {CFS_PERIOD_US}")
                    or _write_if_exists(d["unified"] / "cpu.weight", str(weight)))
        return None

    def set_pids(self, name: str, n: int | None) -> str | None:
        """At most ``n`` processes (and threads) in the group (v1 ``pids`` controller's
        ``pids.max``, v2 ``pids.max``; None: "max"). Without a pids controller: not enforced
        (None)."""
        d = self.dirs(name)
        target = d.get("pids") if self.version is Version.v1 else d.get("unified")
        if target is None or not (target / "pids.max").exists():
            return None
        return _write(target / "pids.max", "max" if n is None else str(n))

    def pids_max(self, name: str) -> int | None:
        """The group's ``pids.max`` (None: unlimited or no pids controller)."""
        d = self.dirs(name)
        target = d.get("pids") if self.version is Version.v1 else d.get("unified")
        text = _read(target / "pids.max") if target is not None else None
        return int(text) if text and text.isdigit() else None

    def set_weight(self, name: str, cores: float) -> str | None:
        """Give the group the CPU weight of ``cores`` cores (1024 shares or ``cpu.weight`` 100
        per core; the prefix's is set by the operator's ``backend.tree_weight``)."""
        d = self.dirs(name)
        if self.version is Version.v1 and "cpu" in d:
            return _write_if_exists(d["cpu"] / "cpu.shares",
                                    str(max(2, min(262_144, round(cores * 1024)))))
        if self.version is Version.v2:
            return _write_if_exists(d["unified"] / "cpu.weight",
                                    str(max(1, min(10_000, round(cores * 100)))))
        return None

    def _set_memory(self, name: str, mib: float | None) -> str | None:
        d = self.dirs(name)
        value = -1 if mib is None else max(1, round(mib * 2**20))
        if self.version is Version.v1:
            if "memory" not in d:
                return None
            return _write(d["memory"] / "memory.limit_in_bytes", str(value))
        if self.version is Version.v2:
            return _write(d["unified"] / "memory.max", "max" if value < 0 else str(value))
        return None

    def _set_cpus(self, name: str, cpus: str | None) -> str | None:
        if cpus is None:
            return None
        d = self.dirs(name)
        target = d.get("cpuset") if self.version is Version.v1 else d.get("unified")
        if target is None or not (target / "cpuset.cpus").exists():
            return None  # no cpuset controller: pinning is not enforced
        return _write(target / "cpuset.cpus", cpus)

    # --- accounting ----------------------------------------------------------------------

    def cpu_usage(self, name: str) -> float | None:
        """CPU seconds the group's processes have used since the group was made (v1
        ``cpuacct.usage``, nanoseconds; v2 ``cpu.stat``'s ``usage_usec``); None when
        unreadable (no such group, no accounting controller)."""
        d = self.dirs(name)
        if self.version is Version.v1:
            for ctl in ("cpuacct", "cpu"):
                text = _read(d[ctl] / "cpuacct.usage") if ctl in d else None
                if text and text.isdigit():
                    return int(text) / 1e9
            return None
        if self.version is Version.v2:
            for line in (_read(d["unified"] / "cpu.stat") or "").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec" and value.strip().isdigit():
                    return int(value) / 1e6
        return None

    # --- freezer -----------------------------------------------------------------------

    def freeze(self, name: str) -> str | None:
        """Suspend every process of the group (v1 ``freezer.state``, v2 ``cgroup.freeze``;
        SIGSTOP when no freezer is available)."""
        return self._freezer(name, True)

    def thaw(self, name: str) -> str | None:
        return self._freezer(name, False)

    def frozen(self, name: str) -> bool:
        d = self.dirs(name)
        if self.version is Version.v1 and "freezer" in d:
            return (_read(d["freezer"] / "freezer.state") or "") in ("FROZEN", "FREEZING")
        if self.version is Version.v2:
            return (_read(d["unified"] / "cgroup.freeze") or "0") == "1"
        return False

    def _freezer(self, name: str, on: bool) -> str | None:
        d = self.dirs(name)
        if self.version is Version.v1 and "freezer" in d:
            return _write(d["freezer"] / "freezer.state", "FROZEN" if on else "THAWED")
        if self.version is Version.v2 and (d["unified"] / "cgroup.freeze").exists():
            return _write(d["unified"] / "cgroup.freeze", "1" if on else "0")
        for pid in self.pids(name):  # no freezer: stop/continue the processes
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP if on else signal.SIGCONT)
        return None

    def _main_dir(self, name: str) -> Path | None:
        d = self.dirs(name)
        return d.get("cpu") or d.get("unified") or next(iter(d.values()), None)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) said it exists
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _enable_v2(parent: Path) -> None:
    """Delegate cpu, memory and cpuset to the children of ``parent`` (best effort)."""
    ctl = parent / "cgroup.subtree_control"
    if not ctl.exists():
        return
    have = set((_read(parent / "cgroup.controllers") or "").split())
    enabled = set((_read(ctl) or "").split())
    for c in ("cpu", "memory", "cpuset", "pids"):
        if c in have and c not in enabled:
            _write(ctl, f"+{c}")


def _inherit_cpuset(base: Path, d: Path) -> None:
    """v1 cpuset groups start with empty cpus/mems: copy them down from the parents."""
    chain = []
    cur = d
    while cur != base and cur.parent != cur:
        chain.append(cur)
        cur = cur.parent
    for g in reversed(chain):
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (g / f).exists() and not (_read(g / f) or ""):
                _write(g / f, _read(g.parent / f) or "")


def _write_if_exists(path: Path, value: str) -> str | None:
    return _write(path, value) if path.exists() else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, value: str) -> str | None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        return f"cannot write {value!r} to {path}: {exc.strerror or exc}"
    return None
