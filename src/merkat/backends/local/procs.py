"""Small helpers of the local backend: VM group names, process groups, exit statuses."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from merkat.backends.local.cgroups import CgroupTree, Limits

WRAPPER = '/bin/sh -c "$1" </dev/null; s=$?; echo "$s" >&0; exit "$s"'
"""Each VM runs ``/bin/sh -c COMMAND`` under this shell (in a new session, the VM's
cgroup), which writes the command's exit status to its fd 0 (the file ``<vm>.exit`` the server
opened for writing; the command's stdin is ``/dev/null``): a VM re-adopted after a restart is
not the new server's child, so its status is read from there (:meth:`LocalBackend.poll`)."""


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
