"""The one way a user's command runs on this machine: as the user's host identity, in a cgroup,
with a clean environment (docs/service.md, "Tenants and isolation").

Every user command goes through here: a VM's command (:func:`spawn`, long-lived, used by
:class:`~merkat.backends.local.LocalBackend`), the template's plugin commands and command
monitors (:func:`run`, short-lived, with a timeout and a cap on the output kept).

In the child, before ``exec``, in this order (all in ``preexec_fn``, because CPython's
``Popen(user=, group=)`` would switch ids *before* ``preexec_fn`` runs, and only root can join
another cgroup):

1. a new session (``start_new_session``: its own process group, so a kill reaches its tree and
   the process outlives a server killed with SIGKILL);
2. join the given cgroups (write ``0`` to each ``cgroup.procs``) while still root;
3. when a directory on the way to a path the user must reach (the server's interpreter, the
   merkat package, the user's work area) is closed to others (e.g. a pyenv under ``/root``,
   0700): a private mount namespace where that directory is a small read-only tmpfs holding
   only bind mounts of those paths (:func:`mount_plan`); the rest of it stays hidden;
4. ``setgroups([])``, ``setgid``, ``setuid`` to the user's identity (only when the server is
   root: otherwise it runs the command as itself, see :func:`can_switch`);
5. ``prctl(PR_SET_NO_NEW_PRIVS)`` (no setuid binary gives privileges back), umask 077;
6. ``chdir`` to the working directory *as the user* (a symlink planted by the user cannot
   make root enter a directory for it).

The environment is :func:`clean_env`: nothing of the server's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["SAFE_PATH", "START_ERRORS", "Identity", "Result", "can_switch", "clean_env",
           "mount_plan", "package_root", "reachable", "run", "spawn"]

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The ``PATH`` of every user command (fixed: nothing of the server's)."""

START_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, TypeError,
                                             subprocess.SubprocessError)
"""What starting a command raises (``subprocess.Popen``'s failures): ``OSError`` (fork, exec, a
missing file), ``ValueError`` or ``TypeError`` (an argument no process takes: a NUL character
in the command or in the environment, a variable name holding ``=``, a value not a string),
``SubprocessError`` (the child's set-up before ``exec`` failed: its cgroup, its identity, its
working directory). Whoever starts one catches these, not only ``OSError``: a NUL in a VM's
command escaped the local backend and left its cgroup behind."""

OUTPUT_LIMIT = 1 << 20
"""What :func:`run` keeps of a command's output (bytes, each stream); the rest is read and
dropped."""

_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 1, 2, 4, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


@dataclass(frozen=True)
class Identity:
    """Whom a user's command runs as: ``name`` the merkat user, ``uid``/``gid`` the host ids,
    ``home`` her work area (``HOME``; owned by ``uid``)."""

    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def server(cls, name: str, home: Path) -> Identity:
        """The server's own ids (no switch: a server that is not root)."""
        return cls(name, os.geteuid(), os.getegid(), Path(home))

    @property
    def switches(self) -> bool:
        """Whether commands really change ids (the server is root and this is not root)."""
        return can_switch() and (self.uid, self.gid) != (os.geteuid(), os.getegid())


def can_switch() -> bool:
    """Whether this process may run commands as other users (it is root)."""
    return os.geteuid() == 0


@dataclass(frozen=True)
class Result:
    """What :func:`run` saw: the exit status (None: killed at the timeout or never started),
    the output (each stream at most :data:`OUTPUT_LIMIT` bytes, decoded leniently) and what
    went wrong (None: it ran to its end, whatever its status)."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    timed_out: bool = False

    def problem(self) -> str | None:
        """One line: the error, a non-zero exit, else None."""
        if self.error:
            return self.error
        if self.returncode:
            tail = self.stderr.strip().splitlines()[-1:] or [""]
            return f"exit status {self.returncode}" + (f": {tail[0][:200]}" if tail[0] else "")
        return None


def package_root() -> Path:
    """The directory holding the server's ``merkat`` package (``PYTHONPATH`` of user commands,
    so ``$MERKAT_PYTHON -m merkat...`` runs the server's version)."""
    return Path(__file__).resolve().parents[3]


def clean_env(identity: Identity | None, merkat: Mapping[str, str] | None = None,
              user: Mapping[str, str] | None = None) -> dict[str, str]:
    """A user command's whole environment: ``PATH`` (:data:`SAFE_PATH`), ``HOME`` (the user's
    work area), ``LANG=C.UTF-8``, ``PYTHONPATH`` (:func:`package_root`), ``MERKAT_PYTHON`` (the
    server's interpreter), the ``merkat`` variables given (``MERKAT_*``), then the template's
    own ``user`` variables (they may override ``PATH``, ``LANG`` or ``PYTHONPATH``, never a
    ``MERKAT_`` name or ``HOME``: the template refuses those). Nothing of the server's."""
    env = {"PATH": SAFE_PATH, "HOME": str(identity.home) if identity else "/", "LANG": "C.UTF-8",
           "PYTHONPATH": str(package_root()), "MERKAT_PYTHON": sys.executable}
    if identity is not None:
        env["MERKAT_USER"] = identity.name
    env.update(merkat or {})
    for k, v in (user or {}).items():
        if not k.startswith("MERKAT_") and k != "HOME":
            env[k] = v
    return env


# --- reaching paths through closed directories ------------------------------------------------

def reachable(path: Path, uid: int, gid: int) -> Path | None:
    """The topmost directory on the way to ``path`` that ``uid``/``gid`` (no supplementary
    groups) cannot traverse, or None when every one can be (``path`` itself included)."""
    path = Path(os.path.realpath(path))
    for d in [*reversed(path.parents), path]:
        if d == Path("/"):
            continue
        try:
            st = d.stat()
        except OSError:
            return None  # not there (yet): nothing to expose
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return d
    return None


def mount_plan(identity: Identity, paths: Sequence[Path],
               writable: Sequence[Path] = ()) -> list[tuple[str, list[tuple[str, bool]]]]:
    """For the ``paths`` (and ``writable`` ones) the user must reach: each closed directory
    (:func:`reachable`) to hide under a tmpfs, with the paths to bind back inside it (path,
    read-only). Empty when nothing is closed (no mount namespace then)."""
    blocked: dict[str, list[tuple[str, bool]]] = {}
    items = [(Path(os.path.realpath(p)), True) for p in paths] + [
        (Path(os.path.realpath(p)), False) for p in writable]
    for path, ro in items:
        if not path.is_dir():
            continue
        top = reachable(path, identity.uid, identity.gid)
        if top is not None:
            blocked.setdefault(str(top), []).append((str(path), ro))
    plan: list[tuple[str, list[tuple[str, bool]]]] = []
    for name in sorted(blocked, key=len):
        outer = next((b for t, b in plan if name.startswith(t.rstrip("/") + "/")), None)
        if outer is not None:  # inside an already hidden directory: bind it there
            outer.extend(blocked[name])
        else:
            plan.append((name, list(blocked[name])))
    out: list[tuple[str, list[tuple[str, bool]]]] = []
    for name, binds in plan:  # drop a path inside another bound path (already there)
        kept: list[tuple[str, bool]] = []
        for p, ro in sorted(set(binds), key=lambda b: len(b[0])):
            if not any(p == k or p.startswith(k.rstrip("/") + "/") for k, _ in kept):
                kept.append((p, ro))
        out.append((name, kept))
    return out


def system_paths() -> list[Path]:
    """What every user command must reach read-only: the server's interpreter (its prefix and
    the virtual environment's) and the merkat package."""
    seen: list[Path] = []
    for p in (Path(os.path.realpath(sys.executable)).parent.parent, Path(sys.base_prefix),
              Path(sys.prefix), package_root()):
        p = Path(os.path.realpath(p))
        if p not in seen:
            seen.append(p)
    return seen


# --- the child ----------------------------------------------------------------------------------

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _preexec(identity: Identity | None, procs: Sequence[str], cwd: str | None,
             plan: list[tuple[str, list[tuple[str, bool]]]]) -> Callable[[], None]:
    """The child's steps before ``exec`` (module doc). Everything is computed here, in the
    parent; the child only makes system calls."""
    libc = _lib()
    switch = identity is not None and identity.switches
    uid = identity.uid if identity else -1
    gid = identity.gid if identity else -1
    tmpfs_flags = _MS_NOSUID | _MS_NODEV

    def child() -> None:
        for path in procs:  # 2. join the cgroups, still root
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        # 3. the closed directories on the way, hidden but for our paths (no mount namespaces
        # here, e.g. a container forbidding them: the paths stay as they are)
        if plan and switch and libc.unshare(_CLONE_NEWNS) == 0:
            _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount private")
            os.umask(0o022)
            for top, binds in plan:
                fds = [(p, ro, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p, ro in binds]
                _check(libc.mount(b"tmpfs", top.encode(), b"tmpfs", tmpfs_flags,
                                  b"mode=0755,size=1m"), f"tmpfs on {top}")
                for p, ro, fd in fds:
                    os.makedirs(p, mode=0o755, exist_ok=True)
                    _check(libc.mount(f"/proc/self/fd/{fd}".encode(), p.encode(), None,
                                      _MS_BIND | _MS_REC, None), f"bind {p}")
                    os.close(fd)
                    if ro:  # best effort: the files' own modes protect them anyway
                        libc.mount(None, p.encode(), None,
                                   _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID, None)
                libc.mount(None, top.encode(), None,
                           _MS_REMOUNT | _MS_RDONLY | tmpfs_flags, b"mode=0755")
        if switch:  # 4. the user's identity, no supplementary groups
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")  # 5.
        os.umask(0o077)
        if cwd:  # 6. as the user
            os.chdir(cwd)

    return child


def _popen(argv: Sequence[str] | str, identity: Identity | None, *, cgroups: Sequence[str],
           env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None, stdin: Any,
           stdout: Any, stderr: Any, pass_fds: Sequence[int],
           expose: Sequence[Path]) -> subprocess.Popen[bytes]:
    args = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
    if env is None:
        env = clean_env(identity)
    plan: list[tuple[str, list[tuple[str, bool]]]] = []
    if identity is not None and identity.switches:
        plan = mount_plan(identity, [*system_paths(), *expose], writable=[identity.home])
    procs = [str(Path(c) / "cgroup.procs") if not str(c).endswith("cgroup.procs") else str(c)
             for c in cgroups]
    return subprocess.Popen(
        args, stdin=stdin, stdout=stdout, stderr=stderr, env=dict(env), cwd=None,
        start_new_session=True, pass_fds=tuple(pass_fds), close_fds=True,
        preexec_fn=_preexec(identity, procs, str(cwd) if cwd else None, plan))


def spawn(argv: Sequence[str] | str, identity: Identity | None, *, cgroups: Sequence[str] = (),
          env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
          stdout: IO[bytes] | int | None = None, stderr: IO[bytes] | int | None = None,
          stdin: IO[bytes] | int | None = subprocess.DEVNULL, pass_fds: Sequence[int] = (),
          expose: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
    """Start a long-lived user command (a VM): ``argv`` (a string runs under ``/bin/sh -c``) as
    ``identity`` (None: as the server, the environment still clean) in a new session, inside
    ``cgroups`` (directories, or their ``cgroup.procs`` files), with ``env`` (default:
    :func:`clean_env`), in ``cwd``, ``stdin`` (default ``/dev/null``), output to ``stdout``/``stderr``
    (files the server opened: the user needs no access to them), ``pass_fds`` kept open;
    ``expose``: more directories to make reachable read-only. Raises one of
    :data:`START_ERRORS` when it cannot start."""
    return _popen(argv, identity, cgroups=cgroups, env=env, cwd=cwd, stdin=stdin,
                  stdout=stdout, stderr=stderr, pass_fds=pass_fds, expose=expose)


def run(argv: Sequence[str] | str, identity: Identity | None, *, cgroups: Sequence[str] = (),
        env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        timeout: float = 5.0, input: bytes | None = None, limit: int = OUTPUT_LIMIT,
        expose: Sequence[Path] = ()) -> Result:
    """Run a short user command (a plugin, a command monitor, a copy) like :func:`spawn` and
    wait at most ``timeout`` seconds: then its whole process group is killed (SIGKILL) and the
    result says ``timed_out``. Keeps at most ``limit`` bytes of each output stream. Never
    raises: a command that cannot start is a :class:`Result` with an ``error``."""
    try:
        proc = _popen(argv, identity, cgroups=cgroups, env=env, cwd=cwd,
                      stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(),
                      expose=expose)
    except START_ERRORS as exc:
        return Result(None, error=f"cannot start: {exc}")
    if input is not None and proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.write(input)
        with contextlib.suppress(OSError):
            proc.stdin.close()
    out, err, timed_out = _collect(proc, timeout, limit)
    code = proc.poll()
    if timed_out or code is None:
        _kill_group(proc)
        return Result(None, out, err, f"timed out after {timeout:g} s", True)
    return Result(code, out, err)


def _collect(proc: subprocess.Popen[bytes], timeout: float, limit: int) -> tuple[str, str, bool]:
    """Read both pipes until they close or ``timeout``; keep ``limit`` bytes of each."""
    bufs: dict[int, bytearray] = {}
    end = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                bufs[f.fileno()] = bytearray()
                sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.fd]
                if len(buf) < limit:
                    buf += chunk[:limit - len(buf)]
        if not timed_out:
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
    fds = list(bufs)
    out = bufs[fds[0]].decode(errors="replace") if fds else ""
    err = bufs[fds[1]].decode(errors="replace") if len(fds) > 1 else ""
    return out, err, timed_out


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(2.0)
