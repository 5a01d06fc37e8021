"""The users' files: uploads, each VM's working directory and the template's files in and out
(Merkat §4.1.1: "files copied in/from the VMs before/after the application is
started/stopped"; §4.2.2's configuration step: a shared file system).

Everything lives in the owner's work area (:mod:`merkat.service.tenants`: ``files/``,
``work/<platform>/shared``, ``work/<platform>/<cluster>-<k>``, ``out/<platform>/...``) and is
made **by the user's own identity**: the directories and copies are commands run through the
sandbox (:func:`merkat.backends.local.sandbox.run`), so ``files_in`` reads only what she can
read (a link she planted to ``/etc/shadow`` or another user's area fails with "Permission
denied") and nothing the server does follows a link of hers. Uploads are written by the server
through directory descriptors without following links (:func:`put_file`).

``files_in`` names are relative to her ``files/`` (the template refuses absolute names and
``..``); a missing one is an error of that VM (reported as data by the backend). ``files_out``
names are relative to the VM's working directory; a missing one is skipped and named.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from merkat.backends.local.sandbox import Identity, run
from merkat.service import tenants

FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
"""An uploaded file's name: a plain name (no ``/``, not hidden, at most 128 characters)."""

PREPARE = r'''set -e
d=$1; s=$2; f=$3; shift 3
mkdir -p -m 700 -- "$d" "$s"
for x; do
  if [ ! -e "$f/$x" ]; then echo "files_in: no such file $x (upload it: merkat file put)" >&2; exit 3; fi
  cp -RL -- "$f/$x" "$d"/
done'''

COLLECT = r'''w=$1; o=$2; shift 2
mkdir -p -m 700 -- "$o" || exit 1
for x; do
  if [ -e "$w/$x" ]; then
    mkdir -p -- "$o/$(dirname -- "$x")" && cp -R -- "$w/$x" "$o/$x"
  else echo "$x"; fi
done'''


class FileError(ValueError):
    """A refused upload (the message names the field: ``name``, ``size``)."""


def prepare(ident: Identity, platform: str, cluster: str, k: int, files_in: list[str],
            timeout: float = 120.0) -> Path:
    """Make the VM's working directory and the platform's shared one, and copy ``files_in``
    (from the user's ``files/``) into the former, all as the user. Returns the working
    directory; raises ``OSError`` with the reason when it fails (the VM's error)."""
    cwd = tenants.work_dir(ident, platform, cluster, k)
    if not files_in:  # no copy: the directories alone, without a process
        make_dirs(ident, cwd, tenants.shared_dir(ident, platform))
        return cwd
    r = run(["/bin/sh", "-c", PREPARE, "prepare", str(cwd),
             str(tenants.shared_dir(ident, platform)), str(tenants.files_dir(ident)),
             *files_in], ident, timeout=timeout)
    if r.error or r.returncode:
        raise OSError((r.stderr.strip().splitlines() or [r.error or "cannot prepare"])[-1])
    return cwd


def make_dirs(ident: Identity, *paths: Path) -> None:
    """Make ``paths`` (inside the user's area) owned by her, mode 0700: one directory at a time
    through descriptors, never following a link (a link she planted is an error, not a way
    out). Raises ``OSError``."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    for path in paths:
        rel = Path(path).relative_to(ident.home)
        fd = os.open(ident.home, flags)
        try:
            for part in rel.parts:
                made = False
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                    made = True
                nfd = os.open(part, flags, dir_fd=fd)
                os.close(fd)
                fd = nfd
                if made and ident.switches:
                    os.fchown(fd, ident.uid, ident.gid)
        finally:
            os.close(fd)


def collect(ident: Identity, platform: str, files_out: list[str], vm_dir: str,
            timeout: float = 120.0) -> list[str]:
    """Copy ``files_out`` of the VM working directory ``vm_dir`` (``<cluster>-<k>``) to
    ``out/<platform>/<vm_dir>/`` as the user; returns the names that were missing (or all of
    them with a reason when the copy could not run)."""
    work = tenants.shared_dir(ident, platform).parent / vm_dir
    out = tenants.out_dir(ident, platform) / vm_dir
    r = run(["/bin/sh", "-c", COLLECT, "collect", str(work), str(out), *files_out], ident,
            timeout=timeout)
    if r.error:
        return [f"{f} ({r.error})" for f in files_out]
    return [line for line in r.stdout.splitlines() if line]


def vm_dirs(ident: Identity, platform: str, cluster: str) -> list[str]:
    """The names of ``cluster``'s VM working directories of ``platform`` (``main-0``...)."""
    base = tenants.shared_dir(ident, platform).parent
    pat = re.compile(rf"^{re.escape(cluster)}-\d+$")
    with contextlib.suppress(OSError):
        return sorted(e.name for e in os.scandir(base) if pat.match(e.name))
    return []


# --- uploads -------------------------------------------------------------------------------

def _open_files_dir(ident: Identity) -> int:
    """A descriptor of the user's ``files/`` (made if missing), no link followed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    home = os.open(ident.home, flags)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir("files", 0o700, dir_fd=home)
        fd = os.open("files", flags, dir_fd=home)
    finally:
        os.close(home)
    if ident.switches:
        os.fchown(fd, ident.uid, ident.gid)
    return fd


def check_name(name: str) -> str:
    if not FILE_NAME.match(name):
        raise FileError(f"name: {name!r} is not a file name (1-128 of A-Z a-z 0-9 _.+-, "
                        "not starting with '.', '+' or '-')")
    return name


class Upload:
    """One upload being written: a hidden temporary file in the user's ``files/`` (made
    without following a link), renamed over ``name`` by :meth:`commit`, removed by
    :meth:`abort`. Written chunk by chunk (:meth:`write`), so an upload is never held whole in
    memory (the API streams the request's body into it).

    ``max_total``: the bytes all of the user's files may hold together, the file this upload
    replaces not counted and her other uploads in progress counted at their size so far (two
    uploads started at once may each see the other small: together they pass the limit by
    at most what they write after both started)."""

    def __init__(self, ident: Identity, name: str, max_size: int, max_files: int,
                 max_total: int | None = None) -> None:
        """Refused (:class:`FileError`, nothing made) for a bad ``name``, ``max_files`` files
        already or ``max_total`` bytes already held; raises ``OSError`` when the directory
        cannot be written."""
        check_name(name)
        self.ident, self.name, self.max_size, self.size = ident, name, max_size, 0
        self.dir = _open_files_dir(ident)
        self.tmp = f".upload-{os.getpid()}-{id(self)}"
        self.out = -1
        self.room: int | None = None
        try:
            if name not in os.listdir(self.dir) and len(os.listdir(self.dir)) >= max_files:
                raise FileError(f"name: you already have {max_files} files (tenants.max_files)")
            if max_total is not None:
                self.room = max_total - _held(self.dir, name)
                if self.room <= 0:
                    raise FileError(f"size: your files already hold {max_total} bytes or more "
                                    "(tenants.max_files_bytes): delete some first")
            self.out = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                               0o600, dir_fd=self.dir)
        except BaseException:
            self.abort()
            raise

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; past ``max_size`` bytes :class:`FileError` (``size: ...``)."""
        self.size += len(chunk)
        if self.size > self.max_size:
            raise FileError(f"size: over the limit of {self.max_size} bytes (tenants.max_file)")
        if self.room is not None and self.size > self.room:
            raise FileError(f"size: your files would hold more than the limit of all of them "
                            f"together (tenants.max_files_bytes; {self.room} bytes were left)")
        view = memoryview(chunk)
        while view:
            view = view[os.write(self.out, view):]

    def commit(self) -> int:
        """The file in place of any of its name (owned by the user); returns its size."""
        try:
            if self.ident.switches:
                os.fchown(self.out, self.ident.uid, self.ident.gid)
            os.close(self.out)
            self.out = -1
            os.rename(self.tmp, self.name, src_dir_fd=self.dir, dst_dir_fd=self.dir)
        except BaseException:
            self.abort()
            raise
        os.close(self.dir)
        self.dir = -1
        return self.size

    def abort(self) -> None:
        """Nothing of the upload is left (idempotent)."""
        if self.out >= 0:
            os.close(self.out)
            self.out = -1
        if self.dir >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dir)
            os.close(self.dir)
            self.dir = -1


def _held(dir_fd: int, replaced: str) -> int:
    """The bytes of the regular files in the open directory ``dir_fd`` (uploads in progress
    included, links not followed), ``replaced`` not counted."""
    total = 0
    for entry in os.listdir(dir_fd):
        if entry == replaced:
            continue
        with contextlib.suppress(OSError):
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def put_file(ident: Identity, name: str, chunks: Any, max_size: int, max_files: int,
             max_total: int | None = None) -> int:
    """Write the upload ``name`` (an iterable of byte chunks) into the user's ``files/``,
    owned by her, replacing a file of that name atomically. Refused (:class:`FileError`,
    nothing written) past ``max_size`` bytes, ``max_files`` files or ``max_total`` bytes of
    all her files. Returns its size."""
    up = Upload(ident, name, max_size, max_files, max_total)
    try:
        for chunk in chunks:
            up.write(chunk)
    except BaseException:
        up.abort()
        raise
    return up.commit()


def delete_file(ident: Identity, name: str) -> bool:
    """Remove the user's file ``name`` (a link is removed, never followed); ``False`` when she
    has none of that name. Refused (:class:`FileError`) for a bad ``name``."""
    check_name(name)
    fd = _open_files_dir(ident)
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        raise FileError(f"name: {name!r} is a folder, not one of your uploads") from None
    finally:
        os.close(fd)
    return True


def list_files(ident: Identity) -> list[dict[str, Any]]:
    """The user's uploaded files: name, size (bytes), modified (Unix s); links not followed."""
    try:
        fd = _open_files_dir(ident)
    except OSError:
        return []
    out = []
    try:
        for name in sorted(os.listdir(fd)):
            if name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                out.append({"name": name, "size": st.st_size if stat.S_ISREG(st.st_mode)
                            else None, "modified": st.st_mtime})
    finally:
        os.close(fd)
    return out
