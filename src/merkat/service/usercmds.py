"""What the applications manager runs for a user, always as her (docs/service.md, "Tenants and
isolation"): the template's plugins, the copy of ``files_out`` and the removal of a deleted
platform's working directories (command monitors:
:func:`merkat.service.probes.run_monitor_command`). Each
resolves the platform owner's identity (:class:`~merkat.service.tenants.Tenants`) and goes
through the sandbox; a failure is an event of the platform, never an exception of the period.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from merkat.service import files
from merkat.service.backends import PluginGroups
from merkat.service.plugins import run_plugin
from merkat.service.templates import Template


def files_out(m: Any, t: Template, owner: str) -> None:
    """Copy each VM's ``files_out`` to ``owner``'s ``out/<platform>/``, as her
    (:func:`~merkat.service.files.collect`); a ``files-out`` event names what was missing."""
    if not any(c.files_out for c in t.clusters):
        return
    try:
        ident = m.tenants.identity(owner)
    except ValueError as exc:
        m._event("files-out", f"{t.name}: {exc}", t.name)
        return
    for c in t.clusters:
        for wd in files.vm_dirs(ident, t.name, c.name) if c.files_out else []:
            missing = files.collect(ident, t.name, c.files_out, wd)
            if missing:
                m._event("files-out", f"{t.name}/{wd}: no {', '.join(missing)}", t.name)


def plugin(m: Any, t: Template, owner: str, name: str, old: str, new: str) -> None:
    """Run the template's command for platform ``name``'s change ``old`` → ``new``
    (:func:`~merkat.service.plugins.run_plugin`) as ``owner``, in the platform's ``plugins``
    cgroup; a ``plugin-error`` event when it cannot be started."""
    try:
        ident = m.tenants.identity(owner)
    except ValueError as exc:
        m._event("plugin-error", f"{name}: {exc}", name)
        return
    groups = m.backend.plugin_cgroups(name, m.tenants.pids(None)) \
        if isinstance(m.backend, PluginGroups) else []
    error = run_plugin(t.commands, Path(m.config.data_dir), name, old, new, identity=ident,
                       cgroups=groups)
    if error is not None:
        m._event("plugin-error", error, name)


def remove_work(m: Any, owner: str, platform: str) -> None:
    """Remove ``platform``'s working directories from ``owner``'s area (``work/<platform>``),
    as her (a deleted platform; its ``out/`` results stay)."""
    from merkat.backends.local.sandbox import run
    from merkat.service import tenants

    try:
        ident = m.tenants.identity(owner)
    except ValueError:
        return
    work = tenants.shared_dir(ident, platform).parent
    if work.exists():
        run(["rm", "-rf", "--", str(work)], ident, timeout=60.0)
