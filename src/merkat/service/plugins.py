"""The template's plugins (Merkat §4.3): shell commands run on a platform's state changes.

A template's ``commands`` (:class:`~merkat.service.templates.Commands`) name a command per
event: ``start`` on the platform's first run, ``suspend``, ``resume`` (running again after a
suspension), ``stop`` when it ends (finished or stopped); ``monitor`` is not a transition's
(the manager polls it as the platform's monitor when its cluster has none). The
applications manager calls :func:`run_plugin` on each state change it records; the command
runs in the background through the sandbox (:func:`merkat.backends.local.sandbox.spawn`: its
own session, no stdin, as the platform owner's ``identity``, in ``cgroups`` — the platform's
``plugins`` group — in her work area) with a clean environment holding ``MERKAT_PLATFORM``,
``MERKAT_STATE`` and ``MERKAT_PYTHON``, its output appended to
``<data_dir>/logs/<platform>/plugins.log`` (opened by the server). A command that cannot be
started (the log or the shell fails to open) is returned as a message: the manager records a
``plugin-error`` event.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from merkat.service.templates import Commands

if TYPE_CHECKING:
    from merkat.backends.local.sandbox import Identity


def run_plugin(cmds: Commands, data_dir: Path, name: str, old: str, new: str, *,
               identity: Identity | None = None, cgroups: Sequence[str] = ()) -> str | None:
    """Start the command of ``cmds`` for platform ``name``'s change from state ``old`` to
    ``new``, if there is one (module doc); returns why it could not be started, else None."""
    if new == "running":
        cmd = cmds.resume if old == "suspended" else cmds.start
    elif new == "suspended":
        cmd = cmds.suspend
    elif new in ("finished", "stopped"):
        cmd = cmds.stop
    else:
        cmd = None
    if not cmd:
        return None
    log = data_dir / "logs" / name / "plugins.log"
    from merkat.backends.local.sandbox import START_ERRORS, clean_env, spawn

    env = clean_env(identity, {"MERKAT_PLATFORM": name, "MERKAT_STATE": new})
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            spawn(cmd, identity, cgroups=cgroups, env=env, stdout=out, stderr=subprocess.STDOUT,
                  cwd=identity.home if identity is not None else None)
    except START_ERRORS as exc:
        return f"{name}: cannot run {cmd!r}: {exc}"
    return None
