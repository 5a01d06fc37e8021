"""Each default written once (merkat/defaults.py) and one options object per trace run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from merkat import defaults

SRC = Path(__file__).resolve().parents[1] / "src" / "merkat"


def test_micro_and_the_defaults_are_defined_in_one_module_only() -> None:
    names = [n for n in vars(defaults) if n.isupper()]
    assert {"MICRO", "PERIOD_S", "ADMISSION_S", "KEEP_ALIVE", "RESERVE_PRICE"} <= set(names)
    pattern = re.compile(rf"^({'|'.join(names)})\s*(:[^=]+)?=", re.M)
    found = {}
    for path in SRC.rglob("*.py"):
        for m in pattern.finditer(path.read_text()):
            found.setdefault(m.group(1), []).append(path.relative_to(SRC).as_posix())
    assert all(where == ["defaults.py"] for where in found.values()), found


def test_every_configuration_takes_its_defaults_from_the_one_module() -> None:
    from merkat.bank.memory import MemoryLedger
    from merkat.core.period import Platform
    from merkat.market import Hosts
    from merkat.runtime.economy import Economy
    from merkat.service.config import ServiceConfig
    from merkat.worlds.merkat.options import MarketConfig, RunOptions

    m = MarketConfig()
    assert (m.policy, m.period, m.admission, m.keep_alive, m.reserve, m.market, m.economy,
            m.charging, m.redistribute_every, m.boot_s) == (
        defaults.POLICY, defaults.PERIOD_S, defaults.ADMISSION_S, defaults.KEEP_ALIVE,
        defaults.RESERVE_PRICE, defaults.MECHANISM, defaults.ECONOMY, defaults.CHARGE_BY,
        defaults.REDISTRIBUTE_EVERY, defaults.VM_OVERHEAD_S)
    p = Platform(Hosts(("h0",), np.array([[1.0, 1024.0]])))
    assert (p.period, p.keep_alive, p.market) == (defaults.PERIOD_S, defaults.KEEP_ALIVE,
                                                  defaults.MECHANISM)
    assert set(p.reserve.values()) == {defaults.RESERVE_PRICE}
    e = Economy(MemoryLedger())
    assert (e.kind, e.charging, e.redistribute_every) == (
        defaults.ECONOMY, defaults.CHARGE_BY, defaults.REDISTRIBUTE_EVERY)
    c = ServiceConfig()
    assert (c.period, c.admission, c.economy, c.charging, c.redistribute_every) == (
        defaults.LIVE_PERIOD_S, defaults.ADMISSION_S, defaults.ECONOMY, defaults.CHARGE_BY,
        defaults.REDISTRIBUTE_EVERY)
    assert c.reserve == {"cpu": defaults.RESERVE_PRICE, "memory": defaults.RESERVE_PRICE}
    # one options object per run: the run's options hold the market's once, repeat none
    run = {f.name for f in dataclasses.fields(RunOptions)}
    market = {f.name for f in dataclasses.fields(MarketConfig)}
    assert "market_config" in run and not run & market, run & market
