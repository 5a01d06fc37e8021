"""Per-user quotas of the live service: how much of the shared machine one user may hold.

Four limits, each a server default in the config (``quotas:``, :class:`QuotaConfig
<merkat.service.config.QuotaConfig>`) that an admin may override per user (``merkat user
quota NAME --platforms 5 ...``, table ``svc_quotas``; ``--reset`` drops the overrides):

- ``platforms``: platforms that have not ended (:data:`ACTIVE`: queued, waiting, running,
  suspended);
- ``vms``: the VMs those platforms hold, in all — a platform holds the larger of its
  template's size (clusters × count) and the VMs it has now;
- ``vms_per_platform``: one platform's VMs — its template's size at submission, and what a
  horizontal controller may grow it to (:func:`bound_growth`);
- ``template_bytes``: the size of the template as stored (its validated JSON).

:func:`check_submit` (called by ``Manager.submit`` under the manager's lock, so two
submissions of one user cannot both take the last place) raises :class:`QuotaExceeded`
naming the quota, the user's current use and her limit: status 429 when the use of
platforms or VMs is full (it frees when platforms end), 422 when the template alone is over
a limit (sending it again can never succeed: ``vms_per_platform``, ``template_bytes``, or
more VMs than the whole ``vms`` quota). Growth is bounded at every period:
:func:`bound_growth` gives each active platform the ``nvms_max`` its controller sees (the
controllers never ask for more): at most ``vms_per_platform``, never below its template's
size, and the owner's free VMs shared equally among her active platforms, so their sum
never exceeds ``vms``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, delete, insert, select, update

from merkat.service import schema as s
from merkat.service.config import QuotaConfig
from merkat.service.db import ACTIVE_STATES, StoreError

if TYPE_CHECKING:
    from merkat.service.context import ManagerState
    from merkat.service.templates import Template

ACTIVE = ACTIVE_STATES
"""Platform states that count against ``platforms`` and ``vms`` (those that have not ended)."""

FIELDS = ("platforms", "vms", "vms_per_platform", "template_bytes")


class QuotaExceeded(StoreError):
    """A submission over a quota; ``status`` is the HTTP status (429 or 422), ``quota`` the
    quota's name."""

    def __init__(self, quota: str, message: str, status: int) -> None:
        super().__init__(f"quota {quota}: {message}")
        self.quota = quota
        self.status = status


# --- the overrides ------------------------------------------------------------------------


def overrides(engine: Engine) -> dict[str, dict[str, int]]:
    """Every user's overrides: ``{user: {quota: value}}`` (only the quotas set)."""
    with engine.connect() as conn:
        rows = list(conn.execute(select(s.quotas)))
    return {r.user: {f: getattr(r, f) for f in FIELDS if getattr(r, f) is not None}
            for r in rows}


def limits(default: QuotaConfig, engine: Engine, user: str,
           table: dict[str, dict[str, int]] | None = None) -> QuotaConfig:
    """``user``'s quotas: the server's defaults with her overrides (``table``: all users'
    overrides, read once by the caller)."""
    own = (overrides(engine) if table is None else table).get(user, {})
    return default.model_copy(update=own) if own else default


def set_quota(engine: Engine, user: str, values: dict[str, int | None]) -> None:
    """Set ``user``'s overrides (a ``None`` value: back to the server's default); unknown
    user → :class:`StoreError`; a negative value → ``ValueError`` naming the quota."""
    for k, v in values.items():
        if k not in FIELDS:
            raise ValueError(f"unknown quota {k!r} ({', '.join(FIELDS)})")
        if v is not None and not 0 <= v <= 2**31 - 1:
            raise ValueError(f"--{k.replace('_', '-')}: must be in [0, {2**31 - 1}], got {v}")
    with engine.begin() as conn:
        if conn.execute(select(s.users.c.id).where(s.users.c.name == user)).first() is None:
            raise StoreError(f"unknown user {user!r}")
        if conn.execute(select(s.quotas.c.user).where(s.quotas.c.user == user)).first():
            conn.execute(update(s.quotas).where(s.quotas.c.user == user).values(**values))
        else:
            conn.execute(insert(s.quotas).values(user=user, **values))


def reset(engine: Engine, user: str) -> None:
    """Drop ``user``'s overrides: the server's defaults apply again."""
    with engine.begin() as conn:
        conn.execute(delete(s.quotas).where(s.quotas.c.user == user))


# --- use and checks -----------------------------------------------------------------------


def template_size(template: dict[str, Any]) -> int:
    """The VMs a stored template asks for (the sum of its clusters' ``count``)."""
    return sum(int(c.get("count", 1)) for c in template.get("clusters", ()))


def usage(m: ManagerState, owner: str) -> dict[str, int]:
    """``owner``'s platforms that have not ended and the VMs they hold (module doc)."""
    rows = m.store.platforms(owner, states=ACTIVE)
    vms = 0
    for row in rows:
        app = m.platform.apps.get(row.name)
        vms += max(template_size(row.template), len(app.columns[0]) if app is not None else 0)
    return {"platforms": len(rows), "vms": vms}


def check_submit(m: ManagerState, owner: str, template: Template) -> None:
    """Refuse (:class:`QuotaExceeded`) a submission of ``template`` by ``owner`` that would
    go over one of her quotas. The caller holds the manager's lock."""
    q = limits(m.config.quotas, m.store.engine, owner)
    size = len(json.dumps(template.model_dump(mode="json")).encode())
    if size > q.template_bytes:
        raise QuotaExceeded("template_bytes", f"the template takes {size:,} bytes; {owner}'s "
                            f"limit is {q.template_bytes:,}", 422)
    n = template.size
    if n > q.vms_per_platform:
        raise QuotaExceeded("vms_per_platform", f"the template asks for {n:,} VMs; {owner}'s "
                            f"limit per platform is {q.vms_per_platform:,}", 422)
    use = usage(m, owner)
    if use["platforms"] + 1 > q.platforms:
        raise QuotaExceeded("platforms", f"{owner} has {use['platforms']:,} platform(s) that "
                            f"have not ended, her limit is {q.platforms:,} (stop one, or ask "
                            "an admin: merkat user quota)", 429)
    if use["vms"] + n > q.vms:  # 422 when no end of another platform can make room
        raise QuotaExceeded("vms", f"the template asks for {n:,} VMs; {owner}'s platforms "
                            f"hold {use['vms']:,} of her {q.vms:,}", 422 if n > q.vms else 429)


def bound_growth(m: ManagerState) -> None:
    """Set each active platform's ``nvms_max`` from its owner's quotas (module doc). Called
    before each period, under the manager's lock."""
    apps = list(m.platform.active.values())
    if not apps:
        return
    table = overrides(m.store.engine)
    queued: dict[str, int] = {}
    for row in m.store.platforms(states=("queued",)):
        queued[row.owner] = queued.get(row.owner, 0) + template_size(row.template)
    by_owner: dict[str, list[Any]] = {}
    for a in apps:
        by_owner.setdefault(a.spec.owner, []).append(a)
    for owner, mine in by_owner.items():
        q = limits(m.config.quotas, m.store.engine, owner, table)
        held = [max(len(a.columns[0]), a.spec.size) for a in mine]
        share = max(0, q.vms - sum(held) - queued.get(owner, 0)) // len(mine)
        for a, h in zip(mine, held, strict=True):
            cap = max(a.spec.size, 1, min(q.vms_per_platform, h + share))
            if a.spec.nvms_max != cap:
                a.spec = replace(a.spec, nvms_max=cap)
