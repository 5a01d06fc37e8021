"""A platform's record and its name's generations (docs/service.md, "Deleting a platform").

A platform's name is unique among the platforms the server has on record. ``merkat platform
delete NAME`` (``DELETE /api/v1/platforms/{name}``) removes an *ended* platform's record —
its row, its VMs' logs and working directories — after which the name can be submitted again.
Not while a destroy of one of its VMs the backend failed is still re-issued every period: a
backend knows a VM by its id, ``NAME/vmN``, so that destroy would reach the next platform's VM
of that id (its local process, its Kubernetes pod); ``delete`` answers 409 naming the VMs.
What the bank recorded stays: the ledger is append-only, so the first platform called ``NAME``
keeps its account ``app:NAME`` and its history, and the next one gets an account of its own,
``app:NAME@2`` (then ``@3``...: :func:`new_account`), with its own per-account idempotency
keys (``budget:NAME@2``, the economy's ``initial-transfer/app:NAME@2``...). Nothing a deleted
platform left behind can block, fund or be charged to its successor. Events stay too (they
are history), under the name.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from merkat.service.status import ENDED_STATES

if TYPE_CHECKING:
    from merkat.service.context import ManagerState


class StillActive(ValueError):
    """The platform has not ended: it cannot be deleted (stop it first); or it has, but a
    destroy of one of its VMs the backend failed is still re-issued every period
    (:meth:`Platform.pending <merkat.core.period.Platform.pending>`): its name is not free
    until that VM is gone."""


def new_account(ledger: Any, name: str) -> str:
    """The bank account of a new platform called ``name``: ``app:NAME`` for the first,
    ``app:NAME@G`` for the G-th (an earlier one's account exists, with its history)."""
    account = f"app:{name}"
    if not ledger.has_account(account):
        return account
    g = 2
    while ledger.has_account(f"{account}@{g}"):
        g += 1
    return f"{account}@{g}"


def delete_platform(m: ManagerState, name: str) -> dict[str, Any]:
    """Remove ended platform ``name``'s record (module doc). Raises
    :class:`~merkat.service.manager.NotFound` or :class:`StillActive`; returns what was
    removed (``name``, ``state``, ``account``: kept in the bank)."""
    from merkat.service.context import NotFound

    with m.lock:
        row = m.store.platform(name)
        if row is None:
            raise NotFound(name)
        app = m.platform.apps.get(name)
        if row.state not in ENDED_STATES and app is not None and not app.active:
            m._sync(m.clock())  # stopped since the last period: its end written now
            row = m.store.platform(name) or row
        if row.state not in ENDED_STATES:
            raise StillActive(f"platform {name!r} is {row.state}: stop it first "
                              f"(merkat platform stop {name})")
        pending = m.platform.pending(name)
        if pending:  # (the next platform of this name would get VMs of these ids)
            vms = f"VM {pending[0]} is" if len(pending) == 1 else \
                f"VMs {', '.join(pending)} are"
            raise StillActive(f"platform {name!r} is {row.state} but its {vms} not destroyed "
                              "yet (the backend failed to, and it is retried every period): "
                              f"delete it once it is (merkat events --platform {name} says "
                              "when)")
        account = app.account if app is not None else (row.account or f"app:{name}")
        m.store.delete_platform(name)
        m.platform.apps.pop(name, None)
        m.live.pop(name, None)
        m.ended.pop(name, None)
        m.paid.pop(name, None)
        m.saved_vms.pop(name, None)
        for vm in [v for v in m.vm_index if v.startswith(f"{name}/")]:
            m.vm_index.pop(vm, None)
        data = Path(m.config.data_dir)
        for part in ("logs", "work"):  # the next platform of this name starts afresh
            shutil.rmtree(data / part / name, ignore_errors=True)
        from merkat.service.usercmds import remove_work

        remove_work(m, row.owner, name)  # its working directories, in the owner's area
        m.store.add_event("deleted", f"platform {name} deleted (it had {row.state}; its "
                          f"account {account} and its history stay in the bank)", name,
                          row.owner)
        return {"name": name, "state": row.state, "account": account}
