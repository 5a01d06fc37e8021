"""The health of the local backend's VMs: the health check (Merkat §4.2.2: an ended process
restarted up to ``max_restarts`` times), the VMs gone for good (the manager fails their
platforms: :mod:`merkat.service.failures`), liveness, signals to a whole VM, the parallel
shutdown, and what a command monitor of a VM runs with.

Each function takes the backend (:class:`Supervised`: what it needs of
:class:`~merkat.backends.local.LocalBackend`, its lock held by the caller) and, where it
applies, a VM (:class:`~merkat.backends.local.procs.VMProcess`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from merkat.backends.local.capacity import Node
from merkat.backends.local.cgroups import CgroupTree, pid_alive
from merkat.backends.local.procs import VMProcess, _exit_status, _group, _killpg
from merkat.core.backend import OpReport


class Supervised(Protocol):
    """What the health check needs of the backend (:class:`~merkat.backends.local.
    LocalBackend`, which hands itself over): its VMs, its cgroup tree, its restart rule, and
    how it spawns, fails and finds a VM."""

    vms: dict[str, VMProcess]
    failures: dict[str, str]
    tree: CgroupTree
    enforced: bool
    max_restarts: int
    _lock: threading.RLock

    def _alive(self, p: VMProcess) -> bool: ...

    def _fail(self, p: VMProcess, reason: str) -> None: ...

    def _spawn(self, p: VMProcess) -> str | None: ...

    def _node(self, host: int) -> Node: ...


UNKNOWN_EXIT = -1
"""The exit code of an adopted VM that ended without writing its status (killed): a failure."""


def health_check(b: Supervised) -> list[Any]:
    """Reap ended processes: status 0 → ``exited``; otherwise restarted while it has restarts
    left, and gone for good (``failed``, with the reason) when its restart fails or its
    restarts are used up. Returns what happened (:class:`~merkat.core.backend.OpReport`)."""
    out: list[Any] = []
    for vm in list(b.vms.values()):
        if vm.state != "running":
            continue
        if vm.proc is not None:
            code = vm.proc.poll()
        elif vm.adopted:  # not our child: it ended when its group is empty
            if b._alive(vm):
                continue
            status = _exit_status(vm.exit_file)
            code = UNKNOWN_EXIT if status is None else status
        else:
            continue
        if code is None:
            continue
        vm.exit_code = code
        if code == 0:
            vm.state = "exited"
            out.append(OpReport.of("exit", vm.id))
        elif vm.restarts < b.max_restarts:
            vm.restarts += 1
            err = b._spawn(vm)
            if err:  # gone for good (the manager fails its platform)
                b._fail(vm, f"exited with code {code}; restart failed: {err}")
            out.append(OpReport.of("restart", vm.id, err and f"restart failed: {err}"))
        else:
            b._fail(vm, f"exited with code {code} after {vm.restarts} restarts")
            out.append(OpReport.of("exit", vm.id, f"exited with code {code} "
                                f"after {vm.restarts} restarts"))
    return out


def failed(b: Supervised) -> dict[str, str]:
    """The VMs gone for good, each with the reason: a process whose restart failed or whose
    restarts are used up, a VM that could not be created (its files, its command, its cgroup),
    or any VM whose state is ``failed``. A destroyed VM leaves the list."""
    out = dict(b.failures)
    for p in b.vms.values():
        if p.state == "failed" and p.id not in out:
            out[p.id] = f"its process failed (exit code {p.exit_code})" \
                if p.exit_code is not None else "its process failed"
    return out


def running(b: Supervised, p: VMProcess) -> bool:
    """Whether any process of VM ``p`` is alive (its child shell, its group's processes, an
    adopted VM's leader); reaps the backend's child when it has ended."""
    if p.proc is not None and p.proc.poll() is None:
        return True
    if b.enforced:
        return any(pid_alive(pid) for pid in b.tree.pids(_group(p.id)))
    return p.proc is None and p.pid is not None and pid_alive(p.pid)


def send(b: Supervised, p: VMProcess, sig: int) -> None:
    """Send ``sig`` to every process of VM ``p``: its group's (thawed first: a frozen process
    acts on no signal) and its process group's."""
    if b.enforced:
        b.tree.thaw(_group(p.id))
        for pid in b.tree.pids(_group(p.id)):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
    if p.pid is not None and (p.proc is None or p.proc.poll() is None):
        _killpg(p.pid, signal.SIGCONT)
        _killpg(p.pid, sig)


def kill(b: Supervised, vm: str) -> str | None:
    """Kill VM ``vm``'s processes and keep it (the heartbeat's restart of a stalled VM,
    ``service/clusters.py``): the next health check finds it ended with a non-zero status and
    restarts it like a failed one, up to ``max_restarts``. An error, or None."""
    with b._lock:
        p = b.vms.get(vm)
        if p is None or p.state != "running":
            return "not running"
        send(b, p, signal.SIGKILL)
        return None


def stop_all(b: Supervised, vms: Sequence[VMProcess], grace: float) -> None:
    """End the processes of ``vms`` all at once: SIGTERM to every VM, one wait of at most
    ``grace`` seconds for all of them, SIGKILL to those left (and one more wait); then
    SIGKILL to what a VM's shell left in its process group. Seconds for any number of VMs,
    not ``grace`` per VM."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [p for p in vms if running(b, p)]
        for p in left:
            send(b, p, sig)
        end = time.monotonic() + grace
        while left and time.monotonic() < end:
            time.sleep(0.02)
            left = [p for p in left if running(b, p)]
        if not left:
            break
    for p in vms:  # (in a cgroup, nothing is left)
        if p.pid is not None and not p.adopted:
            _killpg(p.pid, signal.SIGKILL)


def monitor_context(b: Supervised, vm: str) -> dict[str, Any] | None:
    """What a command monitor of ``vm`` runs with (:mod:`merkat.service.probes`): the VM's
    working directory, its ``MERKAT_*`` environment (the template's own ``env`` included),
    and the ``cgroup.procs`` files of its groups except the freezer's (a monitor is never
    frozen with its VM: a frozen process could not be killed at its time limit)."""
    p = b.vms.get(vm)
    if p is None:
        return None
    node = b._node(p.node)
    env = {"MERKAT_PLATFORM": p.app, "MERKAT_VM": p.id, "MERKAT_CLUSTER": p.launch.cluster,
           "MERKAT_INDEX": str(p.launch.index), "MERKAT_NODE": node.name,
           "MERKAT_CPUS": node.cpus, "MERKAT_PYTHON": sys.executable, **p.launch.env,
           **p.launch.user_env}
    procs = tuple(str(d / "cgroup.procs") for ctl, d in b.tree.dirs(_group(vm)).items()
                  if ctl != "freezer") if b.enforced else ()
    return {"cwd": p.launch.cwd, "env": env, "cgroup_procs": procs}
