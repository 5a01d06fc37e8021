"""The local backend: every VM is a process tree in its own cgroup on this machine.

:class:`LocalBackend` implements :class:`merkat.core.backend.Backend`. The machine is split
into logical *nodes* (a cpuset and a share of the memory each, :class:`Node`); the platform's
host index ``h`` is ``nodes[h]``. For each operation of a :class:`~merkat.core.backend.Plan`:

- **create** — a cgroup ``merkat/<app>/<vm>`` (the node's cpuset, a ``pids.max``), then the
  VM's command started through :mod:`.sandbox` (a new session inside the group, as its owner,
  a clean environment naming its platform, cluster, index and master: ``MERKAT_PLATFORM``,
  ``MERKAT_CLUSTER``, ``MERKAT_INDEX``, ``MERKAT_VM``, ``MERKAT_MASTER``, and what the launcher
  adds), its output appended to ``<logs>/<app>/<vm>.log`` (opened by the server);
- **allocations** — CPU cores as a CFS quota, memory MiB as a memory limit;
- **suspend / resume** — the freezer (SIGSTOP/SIGCONT without one); a resumed VM moves to
  its new node's cpuset;
- **migrate** — the running VM's cpuset becomes the new node's (vCPUs pinned, Merkat §5.1);
- **destroy** — SIGTERM then SIGKILL to the group, then the group is removed.

**Recovery** (:meth:`LocalBackend.adopt`): VMs run in their own sessions, so they outlive a
server killed with SIGKILL; a restarted server finds each one's group, takes its live
processes back (polled, not waited for: they are not its children; the exit status comes from
the file the VM's wrapper shell writes) or starts the VM again when the group is empty or
gone, and :meth:`LocalBackend.reap_orphans` destroys the groups no platform claims.

Without a writable cgroup hierarchy the processes still run, unenforced (:attr:`enforced` is
False and :attr:`warning` says why). Errors never raise: :meth:`LocalBackend.apply` returns an
:class:`~merkat.core.backend.ApplyReport` (each operation done, or failed with the reason;
also kept in :attr:`LocalBackend.report`) — errors from the world are data, and the platform
places a VM whose create or resume failed again in the next period. A create that fails because
of the template (its launcher or its ``files_in``) is gone for good at once; one that fails in
the world (its cgroup, its process) is retried, and gone for good after ``max_restarts``
failed attempts in a row (:meth:`LocalBackend.failed`; the manager then fails its platform).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from merkat.backends.local import escapes, health, sandbox
from merkat.backends.local.capacity import Node, Reserve, reserve_nodes, split_machine
from merkat.backends.local.cgroups import CgroupTree, Limits, pid_alive
from merkat.backends.local.metering import CpuMeter
from merkat.backends.local.ownership import cap_tree, reap, remove_empty, with_identity
from merkat.backends.local.procs import (
    WRAPPER,
    Launch,
    VMProcess,
    _exit_status,
    _group,
    _killpg,
    _leader,
    _safe,
    plugin_group,
    wait_for,
)
from merkat.control.types import Metrics
from merkat.core.backend import ApplyReport, OpReport, Plan

__all__ = ["Launch", "LocalBackend", "Node", "OpReport", "VMProcess", "pid_alive", "split_machine",
           "wait_for"]


Launcher = Callable[[str, str, int], Launch]
"""``launcher(app, vm, index)`` → how to start the ``index``-th VM (0-based) of ``app``."""


class LocalBackend:
    """VMs as cgroup-limited process trees on logical nodes of this machine (module doc)."""

    def __init__(self, nodes: list[Node], logs: Path, *, cgroup_root: Path | None = None,
                 prefix: str = "merkat", max_restarts: int = 3,
                 reserve: Reserve | None = None, identity: str | None = None) -> None:
        # what the market may sell: the machine minus the reserve (.capacity)
        self.capacity = (reserve or Reserve()).check()
        self.nodes = reserve_nodes(nodes, self.capacity)
        self.identity = identity  # carried by every VM (MERKAT_SERVER): .ownership
        self.logs = Path(logs)
        self.tree = CgroupTree(cgroup_root or Path("/sys/fs/cgroup"), prefix)
        self.max_restarts = max_restarts
        self.vms: dict[str, VMProcess] = {}
        self.launchers: dict[str, Launcher] = {}
        self.monitored: dict[str, str] = {}  # app -> the VM whose process ends the app
        self.metrics_of: dict[str, Metrics] = {}
        self.report: list[OpReport] = []
        self.attempts: dict[str, int] = {}  # failed creates or resumes in a row, per VM
        self.failures: dict[str, str] = {}  # VMs gone for good, and why (:meth:`failed`)
        self.foreign: list[str] = []  # VM groups of another server under our prefix (left alone)
        self._lock = threading.RLock()
        self.meter = CpuMeter(self.tree)  # the CPU each VM used (charging by measured use)
        self.enforced = self.tree.enforced and self.tree.create("") is None
        self.warning = None if self.enforced else (
            f"cgroups not writable under {self.tree.root} (need root and cgroup v1 or v2): "
            "VMs run unenforced")
        if self.enforced:  # the VMs together: the allocatable CPU (quota and weight), memory
            err = cap_tree(self.tree, self.capacity)
            if err:
                self.warning = f"cannot cap the VMs at the allocatable capacity: {err}"

    # --- what the applications manager tells us ------------------------------------------

    def register(self, app: str, launcher: Launcher) -> None:
        """How ``app``'s VMs start (called by the applications manager before submitting);
        each VM's environment carries this server's identity (``MERKAT_SERVER``)."""
        self.launchers[app] = with_identity(launcher, self.identity)

    def unregister(self, app: str) -> None:
        """Forget ``app``'s launcher and monitored VM (an admission that failed)."""
        self.launchers.pop(app, None)
        self.monitored.pop(app, None)

    def set_metrics(self, app: str, metrics: Metrics) -> None:
        self.metrics_of[app] = metrics

    def vm_ids(self) -> list[str]:
        """Every VM created and not destroyed, sorted."""
        with self._lock:
            return sorted(self.vms)

    # --- Backend ---------------------------------------------------------------------------

    def apply(self, plan: Plan) -> ApplyReport:
        """Carry out ``plan``; report each operation (also kept in :attr:`report`)."""
        with self._lock:
            report: list[OpReport] = []
            for vm in plan.destroy:
                report.append(OpReport.of("destroy", vm, self._destroy(vm)))
            for vm in plan.suspend:
                report.append(OpReport.of("suspend", vm, self._suspend(vm)))
            for p in plan.create:
                report.append(self._tried("create", p.vm, self._create(p.vm, p.app, p.host)))
            for p in plan.resume:
                report.append(self._tried("resume", p.vm, self._resume(p.vm, p.host)))
            for vm, _src, dst in plan.migrate:
                report.append(OpReport.of("migrate", vm, self._move(vm, dst)))
            for vm, alloc in plan.allocations.items():
                err = self._limit(vm, alloc)
                if err:
                    report.append(OpReport.of("limit", vm, err))
            self.report = report
            return ApplyReport(plan.time, tuple(report))

    def _tried(self, op: str, vm: str, err: str | None) -> OpReport:
        """A create's or resume's outcome, counting the failures in a row: after
        ``max_restarts`` more the VM is gone for good (:meth:`failed`)."""
        if err is None:
            self.attempts.pop(vm, None)
        elif vm not in self.failures:
            n = self.attempts[vm] = self.attempts.get(vm, 0) + 1
            if n > self.max_restarts:
                done = "created" if op == "create" else "resumed"
                self.failures[vm] = f"could not be {done} ({n} attempts): {err}"
        return OpReport.of(op, vm, err)

    def metrics(self, app: str) -> Metrics:
        with self._lock:
            if self.finished(app):  # the monitored process ended: the work is done
                m = self.metrics_of.get(app, Metrics())
                total = m.work_total if m.work_total is not None else max(m.work_done, 1.0)
                return Metrics(work_done=total, work_total=total)
            return self.metrics_of.get(app, Metrics())

    def finished(self, app: str) -> bool:
        vm = self.vms.get(self.monitored.get(app, ""))
        return vm is not None and vm.state == "exited" and vm.exit_code == 0

    def idle(self, app: str) -> frozenset[str]:
        return frozenset()

    def cpu_used(self, app: str) -> float | None:
        """CPU core-seconds ``app``'s VMs used since the last call, from their cgroups'
        counters (:mod:`~merkat.backends.local.metering`); None when unenforced."""
        if not self.enforced:
            return None
        with self._lock:
            return self.meter.take(app, [(v.id, _group(v.id)) for v in self.vms.values()
                                         if v.app == app])

    # --- health ----------------------------------------------------------------------------

    def poll(self) -> list[OpReport]:
        """Reap exited processes; restart a failed one (non-zero exit) up to ``max_restarts``
        times (Merkat §4.2.2's health check: :func:`.health.health_check`). Returns what
        happened."""
        with self._lock:
            out = [OpReport.of("escape", vm, why) for vm, why in escapes.check(self)]
            return out + health.health_check(self)

    def _fail(self, p: VMProcess, reason: str) -> None:
        p.state = "failed"
        self.failures[p.id] = reason

    def failed(self) -> dict[str, str]:
        """The VMs gone for good, each with the reason (:func:`.health.failed`)."""
        with self._lock:
            return health.failed(self)

    def plugin_cgroups(self, app: str, pids: int | None = None) -> list[str]:
        """The plugin commands' group of ``app`` (:func:`.procs.plugin_group`; [] unenforced)."""
        with self._lock:
            return plugin_group(self.tree, app, pids) if self.enforced else []

    def vm(self, vm: str) -> VMProcess | None:
        return self.vms.get(vm)

    def limits(self, vm: str) -> Limits:
        """The limits the kernel holds for ``vm`` now."""
        p = self.vms.get(vm)
        return self.tree.limits(_group(vm)) if p and self.enforced else Limits()

    def adopt(self, vm: str, app: str, host: int, index: int,
              alloc: Mapping[str, float] | None = None) -> OpReport:
        """Take ``vm`` back after the server restarted: its cgroup (this backend's naming,
        ``<prefix>/<app>/<vm>``) still holds live processes → the VM is known again as
        ``running`` on node ``host`` (``suspended`` when its group is frozen; op
        ``adopt-frozen``), its cpuset and ``alloc`` written again (op ``adopt``); its group is
        empty or gone → it is started again (op ``restart``, its files not staged in again).
        ``index`` is its index in its platform (its launcher's). Errors are data."""
        with self._lock:
            if vm in self.vms:
                return OpReport.of("adopt", vm, "already known")
            launcher = self.launchers.get(app)
            if launcher is None:
                return OpReport.of("adopt", vm, f"no launcher registered for application {app!r}")
            group = _group(vm)
            live = [pid for pid in self.tree.pids(group) if pid_alive(pid)] \
                if self.enforced else []
            if not live:
                if self.enforced and self.tree.exists(group):
                    self.tree.remove(group)
                log = self._log(app, vm)
                if _exit_status(log.with_suffix(".exit")) == 0:  # it finished while we were down
                    return self._adopt_exited(vm, app, host, index, launcher, log)
                err = self._create(vm, app, host, index, setup=False)
                if err is None and alloc:
                    err = self._limit(vm, alloc)
                return OpReport.of("restart", vm, err)
            try:
                launch = launcher(app, vm, index)
            except Exception as exc:  # a bad template reaches us as data
                return OpReport.of("adopt", vm, f"cannot prepare VM: {exc}")
            p = VMProcess(vm, app, host, launch, self.tree.path(group), self._log(app, vm),
                          pid=_leader(live), adopted=True)
            frozen = self.tree.frozen(group)
            p.state = "suspended" if frozen else "running"
            self.vms[vm] = p
            escapes.remember(self, p)
            self.meter.start(vm, group, adopted=True)
            err = self.tree.set_limits(group, Limits(cpus=self._node(host).cpus))
            if alloc:
                err = self._limit(vm, alloc) or err
            return OpReport.of("adopt-frozen" if frozen else "adopt", vm, err)

    def monitor_context(self, vm: str) -> dict[str, Any] | None:
        """What a command monitor of ``vm`` runs with (:func:`.health.monitor_context`)."""
        return health.monitor_context(self, vm)

    def _running(self, p: VMProcess) -> bool:
        return health.running(self, p)

    def kill(self, vm: str) -> str | None:
        """Kill a stalled VM for its restart (:func:`.health.kill`)."""
        return health.kill(self, vm)

    def _adopt_exited(self, vm: str, app: str, host: int, index: int, launcher: Launcher,
                      log: Path) -> OpReport:
        """Know ``vm`` again as ended with status 0 (its wrapper wrote it while the server was
        down): not started again; the platform finishes when it is the monitored VM."""
        try:
            launch = launcher(app, vm, index)
        except Exception as exc:  # a bad template reaches us as data
            return OpReport.of("adopt", vm, f"cannot prepare VM: {exc}")
        self.vms[vm] = VMProcess(vm, app, host, launch, self.tree.path(_group(vm)), log,
                                 state="exited", exit_code=0, adopted=True)
        return OpReport.of("adopt-exited", vm)

    def _alive(self, p: VMProcess) -> bool:
        """Whether an adopted VM still runs: a live process in its group (or its pid)."""
        pids = self.tree.pids(_group(p.id)) if self.enforced else ([p.pid] if p.pid else [])
        return any(pid_alive(pid) for pid in pids)

    def reap_orphans(self) -> list[str]:
        """Destroy the VM groups a previous run of this server left under the prefix (it was
        killed) and no platform claims: only groups carrying this server's identity
        (:func:`.ownership.reap`); another server's are left alone, in :attr:`foreign`.
        Returns the destroyed VM ids."""
        if not self.enforced:
            return []
        with self._lock:
            found, self.foreign = reap(self.tree, set(self.vms), self.identity)
        return found

    def describe(self, vm: str) -> dict[str, Any] | None:
        """What the API shows of ``vm``: node, process state, pid, restarts, cgroup, limits."""
        p = self.vms.get(vm)
        if p is None:
            return None
        lim = self.limits(vm)
        process = p.state
        if process == "running" and not self._running(p):  # dead since the last poll
            process = "dead"
        return {"node": self._node(p.node).name, "process": process,
                "pid": p.pid, "restarts": p.restarts, "adopted": p.adopted,
                "exit_code": p.exit_code, "cgroup": p.cgroup if self.enforced else None,
                "cluster": p.launch.cluster, "limits": {"cpu": lim.cpu, "memory": lim.memory,
                                                        "cpus": lim.cpus}}

    def node_list(self) -> list[Node]:
        return list(self.nodes)

    def log_path(self, vm: str) -> str | None:
        p = self.vms.get(vm)
        return str(p.log) if p else None

    def close(self, grace: float = 2.0) -> None:
        """Destroy every VM of this server (it is shutting down; nothing else), all at once:
        every VM is sent SIGTERM (thawed first), they are waited for together at most
        ``grace`` seconds, those left get SIGKILL, then their groups are removed (and the
        prefix when empty) — a couple of seconds for any number of VMs."""
        with self._lock:
            apps = {_safe(p.app) for p in self.vms.values()} | {_safe(a) for a in self.launchers}
            health.stop_all(self, list(self.vms.values()), grace)
            for vm in list(self.vms):
                self._destroy(vm)  # (nothing left to wait for)
            if self.enforced:  # our empty application groups, then the prefix when empty
                remove_empty(self.tree, apps)

    # --- operations --------------------------------------------------------------------------

    def _log(self, app: str, vm: str) -> Path:
        return self.logs / _safe(app) / f"{_safe(vm.rsplit('/', 1)[-1])}.log"

    def _create(self, vm: str, app: str, host: int, index: int | None = None,
                setup: bool = True) -> str | None:
        launcher = self.launchers.get(app)
        if launcher is None:
            return f"no launcher registered for application {app!r}"
        if index is None:
            index = sum(1 for v in self.vms.values() if v.app == app)
        try:
            launch = launcher(app, vm, index)
            if setup and launch.setup is not None:
                launch.setup()
        except Exception as exc:  # a bad template reaches us as data
            self.failures[vm] = f"could not be created: cannot prepare VM: {exc}"
            return f"cannot prepare VM: {exc}"
        p = VMProcess(vm, app, host, launch, self.tree.path(_group(vm)), self._log(app, vm))
        err = self.tree.create(_group(vm)) or self.tree.set_limits(
            _group(vm), Limits(cpus=self._node(host).cpus)) or self.tree.set_pids(
            _group(vm), launch.pids) if self.enforced else None
        err = err or self._spawn(p)
        if err:  # nothing of it is left: the platform creates it again (module doc)
            if self.enforced:
                self.tree.remove(_group(vm))
            return err
        self.vms[vm] = p
        return None

    def _spawn(self, p: VMProcess) -> str | None:
        """Start ``p``'s process in its group; why it could not start (None: started). Never
        raises: whatever starting a process can raise (:data:`.sandbox.START_ERRORS`, a NUL in
        the command as much as a missing log directory) is the reason, so that the caller
        removes the VM's group (a create) or fails the VM (a restart)."""
        merkat = {"MERKAT_PLATFORM": p.app, "MERKAT_VM": p.id,
                  "MERKAT_CLUSTER": p.launch.cluster, "MERKAT_INDEX": str(p.launch.index),
                  "MERKAT_NODE": self._node(p.node).name, "MERKAT_CPUS": self._node(p.node).cpus,
                  "MERKAT_PYTHON": sys.executable, **p.launch.env}
        env = sandbox.clean_env(p.launch.identity, merkat, p.launch.user_env)
        groups = list(self.tree.dirs(_group(p.id)).values()) if self.enforced else []
        try:
            p.log.parent.mkdir(parents=True, exist_ok=True)
            # the server's log and exit file (not the user's): the latter is the wrapper's fd 0
            status = os.open(p.exit_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with open(p.log, "ab") as out:
                    os.chmod(p.log, 0o600)
                    p.proc = sandbox.spawn(
                        ["/bin/sh", "-c", WRAPPER, "merkat-vm", p.launch.command],
                        p.launch.identity, cgroups=[str(g) for g in groups], env=env,
                        cwd=p.launch.cwd or None, stdin=status, stdout=out,
                        stderr=subprocess.STDOUT)
            finally:
                os.close(status)
        except sandbox.START_ERRORS as exc:
            p.state = "failed"
            return f"cannot start {p.launch.command!r}: {exc}"
        p.state = "running"
        p.exit_code = None
        p.pid = p.proc.pid
        p.adopted = False
        escapes.remember(self, p)
        return None

    def _destroy(self, vm: str) -> str | None:
        self.failures.pop(vm, None)
        p = self.vms.pop(vm, None)
        if p is None:
            return None
        err = None
        if self.enforced:
            self.meter.close(vm, p.app, _group(vm))
            err = self.tree.remove(_group(vm))
        if p.proc is not None and p.proc.poll() is None:
            _killpg(p.proc.pid, signal.SIGCONT)
            _killpg(p.proc.pid, signal.SIGTERM)
            try:
                p.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                _killpg(p.proc.pid, signal.SIGKILL)
                p.proc.wait()
        return err

    def _suspend(self, vm: str) -> str | None:
        p = self.vms.get(vm)
        if p is None:
            return "unknown VM"
        if p.state != "running":
            return None
        p.state = "suspended"
        if self.enforced:
            return self.tree.freeze(_group(vm))
        if p.proc is not None:
            _killpg(p.proc.pid, signal.SIGSTOP)
        return None

    def _resume(self, vm: str, host: int) -> str | None:
        p = self.vms.get(vm)
        if p is None:
            return "unknown VM"
        err = self._move(vm, host)
        if p.state == "suspended":
            p.state = "running"
            if self.enforced:
                err = self.tree.thaw(_group(vm)) or err
            elif p.proc is not None:
                _killpg(p.proc.pid, signal.SIGCONT)
        return err

    def _move(self, vm: str, host: int) -> str | None:
        p = self.vms.get(vm)
        if p is None:
            return "unknown VM"
        p.node = host
        if not self.enforced:
            return None
        return self.tree.set_limits(_group(vm), Limits(cpus=self._node(host).cpus))

    def _limit(self, vm: str, alloc: Mapping[str, float]) -> str | None:
        """Write the VM's CPU and memory limits when they changed since the last write."""
        p = self.vms.get(vm)
        if not self.enforced or p is None:
            return None
        if p.state == "failed":  # its group may be gone (an escape): nothing to limit
            return None
        cpu = alloc.get("cpu")
        mem = alloc.get("memory")
        limits = Limits(
            cpu=cpu if cpu is not None and cpu > 0 else (0.001 if cpu is not None else None),
            memory=max(mem, p.launch.memory_floor) if mem else None)
        if limits == p.limits:
            return None
        err = self.tree.set_limits(_group(vm), limits)
        p.limits = None if err else limits
        return err

    def _node(self, host: int) -> Node:
        return self.nodes[host] if 0 <= host < len(self.nodes) else self.nodes[0]



UNKNOWN_EXIT = health.UNKNOWN_EXIT
