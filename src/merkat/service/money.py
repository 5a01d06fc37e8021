"""The live service's money rules: its economy, and the store's part in the end rule.

- :func:`economy_for`: the :class:`~merkat.runtime.economy.Economy` of the server's config
  (``economy``: themis or closed; ``charging``: bid or use, on the measured CPU of each VM's
  cgroup: :mod:`merkat.runtime.metering`, :mod:`merkat.backends.local.metering`), with the end
  rule on (``return_budgets``).
- :class:`StoreEnds`: the driver's hooks of the end rule (:meth:`Driver.close_ended
  <merkat.runtime.driver.Driver.close_ended>`, the same code as the simulator's). A platform
  has ended (finished, stopped by its owner or its controller, failed, deadline passed, out of
  budget): its ended row (state, ended, outcome) is written to the store **in the same
  database transaction** as the movement that gives its account's balance (and an unsettled
  deposit, settled first) back to its owner (:meth:`Economy.close
  <merkat.runtime.economy.Economy.close>`). Either both are done or neither: a transaction
  that fails leaves the platform queued in the driver, still active in the store, and the next
  period ends it again; a server killed in between finds it still active and ends it again.
  The history line is the ledger's (reason ``returned: platform NAME finished``); the event
  is ``returned``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import update

from merkat.bank.ledger import MAX_REASON, Ledger
from merkat.core.period import ENDED
from merkat.runtime.driver import Driver, Ending, Hooks
from merkat.runtime.economy import Economy
from merkat.service import schema as s
from merkat.service.limits import clip

if TYPE_CHECKING:
    from merkat.service.config import ServiceConfig
    from merkat.service.context import ManagerState


def economy_for(config: ServiceConfig, ledger: Ledger) -> Economy:
    """The server's economy: its config's ``economy``, ``charging``, ``redistribute_every``
    and ``provider``. A platform's budget is moved from what its owner holds at admission
    (``owner_funds``: nothing is minted) and goes home by the driver's end rule
    (``return_budgets``, with the store's end state in one transaction: :class:`StoreEnds`)."""
    return Economy(ledger, kind=config.economy, charging=config.charging,
                   redistribute_every=config.redistribute_every, provider=config.provider,
                   metered=config.charging == "use", owner_funds=True, return_budgets=True)


def write_row(name: str, values: Mapping[str, Any]) -> Callable[[Any], None]:
    """The store's update of platform ``name``'s row, to run inside a ledger transaction."""

    def write(conn: Any) -> None:
        conn.execute(update(s.platforms).where(s.platforms.c.name == name).values(**values))

    return write


def why(state: str, reason: str | None) -> str:
    """A platform's end in words, as its ``returned`` line says it: ``finished``,
    ``stopped (stopped by the user)``."""
    if reason and reason.startswith(state):
        return reason
    return state + (f" ({reason})" if reason else "")


class StoreEnds(Hooks):
    """The live service's hooks of the driver's end rule (module doc). ``stored[name]``: the
    end of a platform the driver's platform does not hold (recovery's, which could not be
    admitted again): its row's values, its end in words and its owner."""

    def __init__(self, m: ManagerState) -> None:
        self.m = m
        self.stored: dict[str, tuple[dict[str, Any], str, str]] = {}

    def end_of(self, name: str) -> tuple[dict[str, Any], str, str]:
        """Platform ``name``'s ended row (state, ended, outcome, and started if the store has
        none yet), its end in words and its owner."""
        if name in self.stored:
            return self.stored[name]
        m = self.m
        app = m.platform.apps[name]
        assert app.status in ENDED, f"{name} has not ended"
        state = str(app.status)
        values: dict[str, Any] = {"state": state, "ended": app.end_time or m.clock(),
                                  "outcome": app.reason or state}
        row = m.store.platform(name)
        if app.start_time is not None and row is not None and row.started is None:
            values["started"] = app.start_time
        return values, why(state, app.reason), app.spec.owner

    def ending(self, driver: Driver, app_id: str) -> Ending:
        values, words, _ = self.stored[app_id] = self.end_of(app_id)
        # the history line holds at most MAX_REASON characters, and its end's reason may quote
        # the tenant (a files_in name of 1,000 characters): over it the transaction failed,
        # and with it every period of the server, for everyone, forever
        return Ending(write_row(app_id, values),
                      clip(f"returned: platform {app_id} {words}", MAX_REASON))

    def closed(self, driver: Driver, app_id: str, returned: int) -> None:
        _, words, owner = self.stored.pop(app_id)
        if returned:
            self.m._event("returned", f"platform {app_id} returned {returned / 1e6:g} "
                          f"credits to {owner} ({words})", app_id)

    def end_stored(self, name: str, owner: str, account: str, values: Mapping[str, Any],
                   words: str) -> None:
        """End platform ``name`` that the driver's platform does not hold (its ``account``)
        with ``values``, through the driver's end rule; a platform never admitted (no
        account) only gets its row written. Raises what the transaction raised."""
        m = self.m
        if not m.store.ledger.has_account(account):  # never admitted: nothing to give back
            m.store.set_platform(name, **values)
            return
        self.stored[name] = (dict(values), words, owner)
        m.driver.end(name, account, m.platform.index)
        m.driver.close_ended()
