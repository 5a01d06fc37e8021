"""The template's plugins (Merkat §4.3): shell commands run on a platform's state changes.

A template's ``commands`` (:class:`~merkat.service.templates.Commands`) name a command per
event: ``start`` on the platform's first run, ``suspend``, ``resume`` (running again after a
suspension), ``stop`` when it ends (finished or stopped); ``monitor`` is not a transition's
(the manager polls it as the platform's monitor when its cluster has none). The
applications manager calls :func:`run_plugin` on each state change it records; the command
runs in the background (its own session, no stdin) with ``MERKAT_PLATFORM``,
``MERKAT_STATE`` and ``MERKAT_PYTHON`` in its environment, its output appended to
``<data_dir>/logs/<platform>/plugins.log``. A command that cannot be started (the log or the
shell fails to open) is returned as a message: the manager records a ``plugin-error`` event.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from merkat.service.templates import Commands


def run_plugin(cmds: Commands, data_dir: Path, name: str, old: str, new: str) -> str | None:
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
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MERKAT_PLATFORM": name, "MERKAT_STATE": new,
           "MERKAT_PYTHON": sys.executable}
    try:
        with open(log, "ab") as out:
            subprocess.Popen(["/bin/sh", "-c", cmd], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as exc:
        return f"{name}: cannot run {cmd!r}: {exc}"
    return None
