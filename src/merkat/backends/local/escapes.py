"""Noticing a VM that is no longer confined (docs/service.md, "Tenants and isolation").

Each period :meth:`LocalBackend.poll <merkat.backends.local.LocalBackend.poll>` asks
:func:`escape` about every running VM: its cgroup vanished, or a process of its session (each
VM runs in a session of its own, led by its wrapper shell) sits outside its cgroup in one of
the controllers merkat manages. A user's process cannot do either by itself (``cgroup.procs``
files outside its group are root's), so this is the backstop for what root or another process
did, or a server running without identity switching. Decision: such a VM is **failed**, not
re-confined: its processes, inside and outside the group, are killed
(:func:`kill_session`), and the backend reports an ``escape`` operation the manager turns
into an event (no restarts; the platform handles a failed VM as any other).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from typing import Any

from merkat.backends.local.cgroups import CgroupTree, Version


def sessions(leaders: Iterable[int]) -> dict[int, list[int]]:
    """The processes of each session led by one of ``leaders`` (one scan of ``/proc``)."""
    want = set(leaders)
    out: dict[int, list[int]] = {sid: [] for sid in want}
    if not want:
        return out
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[-1].split()
            except OSError:
                continue
            if len(fields) > 3 and fields[0] != b"Z":
                sid = int(fields[3])
                if sid in want:
                    out[sid].append(int(entry.name))
    return out


def outside(pid: int, tree: CgroupTree, group: str) -> str | None:
    """Where process ``pid`` is when not in ``group`` (or below it) in every controller the
    tree manages: ``"cpu:/"``; None when it is confined (or gone)."""
    want = "/" + tree.path(group)
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    have = set(tree.dirs(group)) if tree.version is Version.v1 else set()
    for line in lines:
        _, ctls, path = line.split(":", 2)
        if tree.version is Version.v2:
            if ctls != "":
                continue
        else:
            if not set(ctls.split(",")) & have:
                continue
        if path != want and not path.startswith(want + "/"):
            return None if exiting(pid) else f"{ctls or 'unified'}:{path}"
    return None


PF_EXITING = 0x4  # the kernel's task flag (include/linux/sched.h): do_exit has begun


def exiting(pid: int) -> bool:
    """Whether process ``pid`` is ending or gone: a zombie, or its ``PF_EXITING`` flag set
    (``/proc/PID/stat`` field 9). On v1 hierarchies the kernel shows such a process in the
    root group (``proc_cgroup_show``: "all zombie tasks show up as belonging to the root
    cgroup"), so a VM's short-lived child read just as it exits would look escaped. Decision:
    its ``/proc/PID/cgroup`` is read first, then this; the flag is never cleared, so a root
    path read while exiting is always caught here."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()
        return fields[0] in (b"Z", b"X", b"x") or bool(int(fields[6]) & PF_EXITING)
    except (OSError, IndexError, ValueError):
        return True


def escape(tree: CgroupTree, group: str, members: list[int]) -> str | None:
    """Why the VM of ``group`` whose session holds ``members`` is not confined, or None."""
    if not tree.exists(group):
        return f"its cgroup {tree.path(group)} vanished"
    for pid in members:
        where = outside(pid, tree, group)
        if where is not None:
            return f"process {pid} left its cgroup (it is in {where}; it runs {_comm(pid)})"
    return None


def _comm(pid: int) -> str:
    """Process ``pid``'s command name, quoted (``/proc/PID/comm``), for the escape's reason: who
    left, when an escape needs explaining; ``'?'`` when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return repr(f.read().strip())
    except OSError:
        return "'?'"


def _start(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks since boot, ``/proc/PID/stat`` field 22), or
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def ours(backend: Any, p: Any) -> bool:
    """Whether VM ``p``'s session leader is still the process the backend started or adopted,
    so that the sessions led by ``p.pid`` are the VM's. Not so when the leader has ended: once
    reaped (``Popen.returncode`` set, e.g. by a liveness check before the health check saw the
    exit) its pid is free, and on a busy machine (``pid_max`` 32768) another session's leader
    may get it — its processes, outside every VM group (a sandboxed command between its
    ``setsid`` and joining its groups), would read as this VM's escape. Decision: a VM whose
    leader was reaped, or whose pid now names a process with another start time than the one
    first seen, is left to the health check (which reports its exit), never failed as escaped.
    The start times are kept on the backend (``_leader_start``: vm → (pid, start)), taken
    when the leader is started or adopted (:func:`remember`), so that the first look is never
    at a pid already given to another process."""
    if p.proc is not None and p.proc.returncode is not None:
        return False
    start = _start(p.pid)
    if start is None:
        return False
    seen = _starts(backend)
    first = seen.get(p.id)
    if first is not None and first[0] == p.pid:
        return first[1] == start
    seen[p.id] = (p.pid, start)  # first seen, or restarted with a new leader
    return True


def _starts(backend: Any) -> dict[str, tuple[int, int]]:
    """The leaders' start times kept on ``backend``: vm → (pid, start)."""
    seen: dict[str, tuple[int, int]] = backend.__dict__.setdefault("_leader_start", {})
    return seen


def remember(backend: Any, p: Any) -> None:
    """Take VM ``p``'s leader's start time now, as the backend starts (``Popen`` returned: the
    leader has joined its groups and runs its command) or adopts it: :func:`ours` compares
    every later look with it."""
    start = _start(p.pid) if p.pid else None
    seen = _starts(backend)
    if start is None:
        seen.pop(p.id, None)
    else:
        seen[p.id] = (p.pid, start)


def kill_session(members: list[int], tree: CgroupTree, group: str) -> None:
    """Kill the VM's processes: those of its session and those still in its group."""
    for pid in {*members, *(tree.pids(group) if tree.exists(group) else [])}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def kernel_tree(tree: CgroupTree) -> bool:
    """Whether ``tree`` is the kernel's (its cpu or unified directory is a cgroup mount), not
    a plain directory playing one in tests: only then do ``/proc/PID/cgroup`` paths apply."""
    base = tree._v1_dirs.get("cpu") if tree.version is Version.v1 else tree.root
    if base is None:
        return False
    mount = str(base)
    try:
        with open("/proc/self/mounts") as f:
            return any(len(w := line.split()) > 2 and w[1] == mount
                       and w[2] in ("cgroup", "cgroup2") for line in f)
    except OSError:
        return False


def check(backend: Any) -> list[tuple[str, str]]:
    """The running VMs of a :class:`~merkat.backends.local.LocalBackend` that are no longer
    confined, as (vm, why): each is failed (state ``failed``, no restart) and its processes
    killed (module doc)."""
    from merkat.backends.local.procs import _group

    running = [p for p in backend.vms.values() if p.state == "running" and p.pid
               and ours(backend, p)]
    if not backend.enforced or not running:
        return []
    real = getattr(backend, "_kernel_tree", None)
    if real is None:
        real = backend._kernel_tree = kernel_tree(backend.tree)
    if not real:
        return []
    members = sessions(p.pid for p in running)
    seen = _starts(backend)
    for gone in seen.keys() - backend.vms.keys():  # (removed VMs: forget their leaders)
        del seen[gone]
    out = []
    for p in running:
        group = _group(p.id)
        why = escape(backend.tree, group, members.get(p.pid, []))
        if why is None or not ours(backend, p):  # (looked at again after the scan: its
            continue  # leader may have ended and its pid gone to another session meanwhile)
        kill_session(members.get(p.pid, []), backend.tree, group)
        fail = getattr(backend, "_fail", None)
        if fail is not None:  # failed for good, with the reason (LocalBackend.failed)
            fail(p, f"escaped: {why}")
        else:
            p.state = "failed"
        out.append((p.id, why))
    return out
