"""The live service's money rules: its economy, and budgets that come home.

- :func:`economy_for`: the :class:`~merkat.runtime.economy.Economy` of the server's config
  (``economy``: themis or closed; ``charging``: bid or use, on the measured CPU of each VM's
  cgroup: :mod:`merkat.runtime.metering`, :mod:`merkat.backends.local.metering`).
- :func:`end_platform`: a platform has ended (finished, stopped by its owner or its controller,
  failed, deadline passed, out of budget): its ended state is written to the store **in the
  same database transaction** as the movement that gives its account's balance (and an
  unsettled deposit) back to its owner (:meth:`Economy.close
  <merkat.runtime.economy.Economy.close>`, the end rule). Either both are done or neither:
  a server killed in between finds the platform still active and ends it again. The history
  line is the ledger's (reason ``returned: platform NAME finished``); the event is
  ``returned``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import update

from merkat.bank.ledger import Ledger
from merkat.runtime.economy import Economy
from merkat.runtime.metering import Metered
from merkat.service import schema as s

if TYPE_CHECKING:
    from merkat.service.config import ServiceConfig
    from merkat.service.context import ManagerState


def economy_for(config: ServiceConfig, ledger: Ledger) -> Economy:
    """The server's economy: its config's ``economy``, ``charging``, ``redistribute_every``
    and ``provider``. A platform's budget is moved from what its owner holds at admission
    (``owner_funds``: nothing is minted); budgets are returned by :func:`end_platform` (with
    the store's end state, in one transaction), not by the driver."""
    return Economy(ledger, kind=config.economy, charging=config.charging,
                   redistribute_every=config.redistribute_every, provider=config.provider,
                   metered=config.charging == "use", owner_funds=True)


def write_row(name: str, values: Mapping[str, Any]) -> Callable[[Any], None]:
    """The store's update of platform ``name``'s row, to run inside a ledger transaction."""

    def write(conn: Any) -> None:
        conn.execute(update(s.platforms).where(s.platforms.c.name == name).values(**values))

    return write


def end_platform(m: ManagerState, name: str, owner: str, values: Mapping[str, Any],
                 why: str) -> int:
    """Write platform ``name``'s end (``values``: state, ended, outcome) and give its money
    back to ``owner`` in one transaction; an event ``returned`` when anything moved. ``why``:
    the end in words (``finished``, ``stopped (stopped by the user)``). Returns the micro-credits
    returned."""
    economy: Economy = m.driver.economy
    app = m.platform.apps.get(name)
    row = m.store.platform(name) if app is None else None
    account = app.account if app is not None else (
        row.account if row is not None and row.account else f"app:{name}")
    ledger = m.store.ledger
    if not ledger.has_account(account):  # never admitted: nothing to give back
        m.store.set_platform(name, **values)
        return 0
    if economy.metered:  # an open deposit of charging by use: pay what was used first
        used = m.backend.cpu_used(name) if isinstance(m.backend, Metered) else None
        paid = economy.settle_ended({name: used}, m.platform.index)
        app = m.platform.apps.get(name)
        if app is not None and paid.get(name):
            app.spent += paid[name]
    returned = economy.close([account], m.platform.index, also=write_row(name, values),
                             reason=f"returned: platform {name} {why}")
    amount = sum(returned.values())
    if amount:
        m._event("returned", f"platform {name} returned {amount / 1e6:g} credits to {owner} "
                 f"({why})", name)
    return amount
