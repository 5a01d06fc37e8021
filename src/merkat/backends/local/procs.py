"""The local backend's VMs as processes: how one starts (:class:`Launch`), its record
(:class:`VMProcess`), and small helpers: VM group names, process groups, exit statuses."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from merkat.backends.local.cgroups import CgroupTree, Limits
from merkat.backends.local.sandbox import Identity

WRAPPER = '/bin/sh -c "$1" </dev/null; s=$?; echo "$s" >&0; exit "$s"'
"""Each VM runs ``/bin/sh -c COMMAND`` under this shell (in a new session, the VM's
cgroup), which writes the command's exit status to its fd 0 (the file ``<vm>.exit`` the server
opened for writing; the command's stdin is ``/dev/null``): a VM re-adopted after a restart is
not the new server's child, so its status is read from there (:meth:`LocalBackend.poll`)."""


@dataclass(frozen=True)
class Launch:
    """How to start one VM: its command, extra environment, working directory, cluster."""

    command: str
    cluster: str = "default"
    index: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    memory_floor: float = 0.0  # MiB: the memory limit never goes under this (the VM's minimum)
    # Prepares the VM's first start (copies its input files): run once by a create, never by
    # an adoption (the files of a re-adopted VM are where it left them).
    setup: Callable[[], Any] | None = field(default=None, compare=False)
    identity: Identity | None = None  # whom it runs as (None: the server, env still clean)
    pids: int | None = None  # the group's pids.max (None: unlimited)
    user_env: Mapping[str, str] = field(default_factory=dict)  # the template's env:
    state: Mapping[str, Any] | None = None  # the cluster's state: (the kubernetes backend's)
    memory_restart: bool = False  # memory_resize: restart (the kubernetes backend's)


@dataclass
class VMProcess:
    """One VM as the backend runs it."""

    id: str
    app: str
    node: int
    launch: Launch
    cgroup: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    state: str = "running"  # running | suspended | exited | failed
    restarts: int = 0
    exit_code: int | None = None
    limits: Limits | None = None  # the CPU/memory limits last written
    pid: int | None = None  # the VM's process (its session leader): our child's, or adopted
    adopted: bool = False  # found in its cgroup after a restart: not our child (polled)

    @property
    def exit_file(self) -> Path:
        """Where the VM's wrapper shell writes its command's exit status."""
        return self.log.with_suffix(".exit")


def plugin_group(tree: CgroupTree, app: str, pids: int | None) -> list[str]:
    """The directories of the group ``<app>/plugins`` the template's plugin commands run in
    (made if missing: one core, at most ``pids`` processes); [] when it cannot be made."""
    group = f"{_safe(app)}/plugins"
    if not tree.exists(group):
        if tree.create(group) or tree.set_limits(group, Limits(cpu=1.0)):
            return []
        tree.set_pids(group, pids)
    return [str(d) for d in tree.dirs(group).values()]


def _exit_status(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _leader(pids: list[int]) -> int:
    """The VM's own process among its group's: the session leader (each VM runs in a new
    session), else the oldest (lowest) pid."""
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid:
                return pid
    return min(pids)


def _group(vm: str) -> str:
    """A VM id ``app/vmN`` → its group name below the prefix (``app/vmN``, made safe)."""
    return "/".join(_safe(part) for part in vm.split("/"))


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", s) or "_"


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll ``cond`` until true or ``timeout`` seconds (a test and demo helper)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
