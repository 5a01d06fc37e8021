"""Each merkat user's host identity and work area (docs/service.md, "Tenants and isolation").

The class :class:`Tenants` maps a merkat user to the
:class:`~merkat.backends.local.sandbox.Identity` her commands run as: the system account
``tenants.accounts[user]`` when configured, else uid and gid ``tenants.uid_base + N`` where
``N`` is her host number (:meth:`~merkat.service.db.Store.tenant_number`: given once, from a
counter that never goes back; a removed user's is never given again). A user of a removed
user's name gets a new number, and the old area (by name) becomes hers. A server that is not root cannot switch identities: it runs every user's
commands as itself and says so once (:attr:`Tenants.warning`).

Her work area is ``<work_root>/<user>`` (``<work_root>/~<id>`` when her name is not a plain
file name), mode 0700, owned by her identity::

    files/                       what she uploaded (PUT /api/v1/files/NAME): files_in's sources
    work/<platform>/shared/      MERKAT_SHARED
    work/<platform>/<cluster>-<k>/   a VM's working directory
    out/<platform>/<cluster>-<k>/    its files_out, when the platform ends

``work_root`` itself is the server's (0711: users reach their own area, list no other). The
server creates only the area's top directory; everything inside is made by the user's own
commands (:mod:`merkat.service.files`), so no link she plants there makes the server write
elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from merkat.backends.local.sandbox import Identity, can_switch

if TYPE_CHECKING:
    from merkat.service.config import ServiceConfig
    from merkat.service.db import Store
    from merkat.service.templates import Template

_PLAIN = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*$")


class TenantError(ValueError):
    """A user without a usable identity (one line)."""


class Tenants:
    """Identities and work areas of the users of one server (module doc)."""

    def __init__(self, config: ServiceConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.root = Path(config.work_root)
        self._cache: dict[str, tuple[int, Identity]] = {}
        self._lock = threading.Lock()
        self.switching = can_switch()
        self.warning = None if self.switching else (
            f"the server is not root (uid {os.geteuid()}): users' commands run as the "
            "server's own user, not each as her own")
        python = os.path.realpath(sys.executable)
        if self.switching and not os.stat(python).st_mode & 0o001:
            self.warning = (f"the server's interpreter {python} cannot be executed by other "
                            "users: $MERKAT_PYTHON fails in their commands (Permission denied)")

    # --- identities -------------------------------------------------------------------------

    def identity(self, user: str) -> Identity:
        """``user``'s identity, her work area created if needed (raises :class:`TenantError`)."""
        with self._lock:
            number = self.store.tenant_number(user)  # a removed user's number is retired
            if number is None:
                raise TenantError(f"no user {user!r}: her commands have no identity")
            got = self._cache.get(user)
            if got is not None and got[0] == number:
                return got[1]
            home = self.root / (user if _PLAIN.match(user) else f"~{number}")
            if not self.switching:
                ident = Identity.server(user, home)
            elif user in self.config.tenants.accounts:
                account = self.config.tenants.accounts[user]
                try:
                    pw = pwd.getpwnam(account)
                except KeyError:
                    raise TenantError(f"tenants.accounts.{user}: no system account "
                                      f"{account!r}") from None
                if pw.pw_uid == 0 or pw.pw_gid == 0:
                    raise TenantError(f"tenants.accounts.{user}: {account!r} is root")
                ident = Identity(user, pw.pw_uid, pw.pw_gid, home)
            else:
                t = self.config.tenants
                if not 0 < number <= t.uid_count:
                    raise TenantError(f"user {user!r} (number {number}) is outside "
                                      f"tenants.uid_count ({t.uid_count})")
                ident = Identity(user, t.uid_base + number, t.uid_base + number, home)
            self._make_area(ident)
            self._cache[user] = (number, ident)
            return ident

    def _make_area(self, ident: Identity) -> None:
        """``work_root`` (the server's, 0711) and the user's area in it (hers, 0700)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if os.stat(self.root).st_uid == os.geteuid():
                os.chmod(self.root, 0o711)
            home = ident.home
            with contextlib.suppress(FileExistsError):
                os.mkdir(home, 0o700)
            st = os.lstat(home)
            if not os.path.isdir(home) or os.path.islink(home):
                raise TenantError(f"{home}: not a directory")
            if self.switching and (st.st_uid, st.st_gid) != (ident.uid, ident.gid):
                _chown_tree(home, ident.uid, ident.gid)  # a user of that name again: hers
            os.chmod(home, 0o700)
        except OSError as exc:
            raise TenantError(f"cannot make the work area of {ident.name}: "
                              f"{exc.strerror or exc}") from None

    # --- what a template may ask -----------------------------------------------------------

    def check(self, template: Template) -> None:
        """Refuse (``TemplateError`` naming the field) what the server's limits forbid: a
        cluster's ``pids`` above ``tenants.max_pids``."""
        from merkat.service.templates import TemplateError

        most = self.config.tenants.max_pids
        for i, c in enumerate(template.clusters):
            if c.pids is not None and c.pids > most:
                raise TemplateError(f"clusters.{i}.pids: {c.pids} exceeds the server's "
                                    f"maximum {most} (tenants.max_pids)")

    def pids(self, asked: int | None) -> int:
        """A VM's ``pids.max``: the template's, else the server's default (never above the
        maximum)."""
        t = self.config.tenants
        return min(asked if asked is not None else t.pids, t.max_pids)


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    """Give the tree ``top`` to ``uid``/``gid``, links themselves (never their targets)."""
    os.chown(top, uid, gid, follow_symlinks=False)
    for root, dirs, names in os.walk(top, followlinks=False):
        for n in dirs + names:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(root, n), uid, gid, follow_symlinks=False)


def files_dir(ident: Identity) -> Path:
    return ident.home / "files"


def work_dir(ident: Identity, platform: str, cluster: str, k: int) -> Path:
    return ident.home / "work" / platform / f"{cluster}-{k}"


def shared_dir(ident: Identity, platform: str) -> Path:
    return ident.home / "work" / platform / "shared"


def out_dir(ident: Identity, platform: str) -> Path:
    return ident.home / "out" / platform
