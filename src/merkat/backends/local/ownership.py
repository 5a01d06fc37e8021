"""Each server owns its subtree: the VM cgroups a server may destroy are its own.

Two servers on one machine must never destroy each other's VMs (issue 26). Three things see
to it:

- the default cgroup prefix is unique per data directory (``merkat-<identity>``,
  :func:`merkat.service.config.server_identity`), so two servers' trees do not meet;
- every VM carries its server's identity: :func:`with_identity` adds ``MERKAT_SERVER=<id>``
  to each VM's environment, which the kernel shows in ``/proc/<pid>/environ`` of the VM's
  processes (inherited by their children);
- :func:`reap` (a restarted server's orphans) destroys a group under the prefix only when no
  platform claims it and it carries this server's identity (its session leader's, the VM's
  wrapper shell: :func:`owned`); an empty group (nothing to kill) is removed. Groups of another
  server, or of a server that gave its VMs no identity, are left alone and reported.

:func:`cap_tree` writes the reserved-capacity cap on the prefix (:mod:`.capacity`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from merkat.backends.local.cgroups import CgroupTree, pid_alive

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from merkat.backends.local.capacity import Allocatable

IDENTITY_ENV = "MERKAT_SERVER"
"""The environment variable naming a VM's server (its identity)."""


def with_identity(launcher: Callable[[str, str, int], Any], identity: str | None
                  ) -> Callable[[str, str, int], Any]:
    """``launcher`` whose launches carry ``identity`` in their environment (unchanged when
    ``identity`` is None)."""
    if identity is None:
        return launcher

    def launch(app: str, vm: str, index: int) -> Any:
        got = launcher(app, vm, index)
        return replace(got, env={**got.env, IDENTITY_ENV: identity})

    return launch


def owner(pid: int) -> str | None:
    """The identity in process ``pid``'s environment (None: none, or unreadable)."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = IDENTITY_ENV.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode(errors="replace")
    return None


def owned(pids: Collection[int], identity: str | None) -> bool:
    """Whether live processes ``pids`` (a VM group's) are this server's: without an identity
    (a backend built bare, as in tests) every group is; else the group's session leader (the
    VM's wrapper shell, started by its server) carries it. A VM's own processes cannot move
    their group: a child that claims another identity (or this one) is not asked. Without a
    leader that says (gone, or no identity): one process carries it and none another's."""
    if identity is None:
        return True
    for pid in sorted(pids):  # the session leader: the VM's wrapper
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid and (boss := owner(pid)) is not None:
                return boss == identity
    owners = {owner(pid) for pid in pids}
    return identity in owners and owners <= {identity, None}


def reap(tree: CgroupTree, known: Collection[str], identity: str | None
         ) -> tuple[list[str], list[str]]:
    """Destroy the VM groups under ``tree``'s prefix that no VM in ``known`` claims and that
    are this server's (module doc). Returns (destroyed, left alone: another server's), as
    VM ids ``app/vm``."""
    destroyed: list[str] = []
    foreign: list[str] = []
    base = tree.dirs("").get("cpu") or tree.dirs("").get("unified")
    for app_dir in sorted(base.iterdir()) if base and base.is_dir() else []:
        if not app_dir.is_dir():
            continue
        for vm_dir in sorted(app_dir.iterdir()):
            if not (vm_dir.is_dir() and (vm_dir / "cgroup.procs").exists()):
                continue
            vm = f"{app_dir.name}/{vm_dir.name}"
            if vm in known:
                continue
            live = [pid for pid in tree.pids(vm) if pid_alive(pid)]
            if live and not owned(live, identity):
                foreign.append(vm)
                continue
            tree.remove(vm)
            destroyed.append(vm)
        with contextlib.suppress(OSError):  # the application's group, once empty
            for d in tree.dirs(app_dir.name).values():
                d.rmdir()
    return destroyed, foreign


def remove_empty(tree: CgroupTree, apps: Collection[str]) -> None:
    """Remove the (empty) groups of ``apps`` and the prefix itself when empty: a group in
    use (another server's VM under a shared prefix) stays."""
    # (an application's plugins group first: :meth:`LocalBackend.plugin_cgroups`)
    for name in [*(f"{a}/plugins" for a in sorted(apps)), *sorted(apps), ""]:
        for d in tree.dirs(name).values():
            with contextlib.suppress(OSError):
                d.rmdir()


def cap_tree(tree: CgroupTree, alloc: Allocatable) -> str | None:
    """Cap the VMs together (the prefix group) at the allocatable CPU (CFS quota, and a
    weight of the allocatable cores, or ``backend.tree_weight``) and memory
    (:mod:`.capacity`)."""
    err = tree.create("") or tree.set_limits("", alloc.limits())
    if err is not None and _clamp_children(tree, alloc.allocatable_cpu):
        err = tree.set_limits("", alloc.limits())  # v1 refuses a cap under a child's quota
    if err is None and alloc.weight is not None:  # backend.tree_weight: set by the operator
        err = tree.set_weight("", alloc.weight)
    return err


def _clamp_children(tree: CgroupTree, cores: float) -> bool:
    """Lower every group's CFS quota under the prefix to at most ``cores`` (cgroup v1 refuses
    a parent's quota under a child's: VMs re-adopted from a server that had a smaller
    reserve). Returns whether any was lowered."""
    from merkat.backends.local.cgroups import CFS_PERIOD_US

    base = tree.dirs("").get("cpu")
    cap = round(cores * CFS_PERIOD_US)
    lowered = False
    for f in sorted(base.glob("*/**/cpu.cfs_quota_us"), key=lambda p: -len(p.parts)) \
            if base is not None and base.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if int(f.read_text()) > cap:
                f.write_text(str(cap))
                lowered = True
    return lowered
