"""The one registry idiom (merkat.registry): every registry of the code is a Registry, an
unknown name is one error type listing the known names, and the CLI turns it into exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from merkat.registry import Registry, UnknownName


def test_register_get_names_and_the_error_listing_the_known_names() -> None:
    r: Registry[object] = Registry("widget")

    @r.register
    class Gear:
        name = "gear"

    @r.register("cog")
    def cog() -> int:
        return 1

    assert r.register("axle", 3) == 3
    assert r.names() == ("gear", "cog", "axle")  # registration order (--help)
    assert r.get("gear") is Gear and r["cog"] is cog and "axle" in r and "nut" not in r
    assert len(r) == 3 and list(r) == ["gear", "cog", "axle"]
    assert r.items() == [("gear", Gear), ("cog", cog), ("axle", 3)]
    with pytest.raises(UnknownName, match=r"^unknown widget 'nut'; known: axle, cog, gear$"):
        r.get("nut")
    with pytest.raises(ValueError, match="widget 'gear' is already registered"):
        r.register("gear", 4)
    with pytest.raises(TypeError, match=r"needs a str \.name"):
        r.register(5)
    r.unregister("gear")
    assert r.names() == ("cog", "axle")


def test_every_registry_of_the_code_is_one_registry_with_its_names() -> None:
    from merkat.cli import NOUNS
    from merkat.control.registry import POLICIES, PolicyError
    from merkat.experiments import EXPERIMENTS
    from merkat.market.mechanisms import MECHANISMS, MechanismError
    from merkat.runtime.economy import CHARGING, ECONOMIES, EconomyError
    from merkat.service.backends import BACKENDS
    from merkat.sim.schedulers import SCHEDULERS
    from merkat.worlds.batch.baselines import SCHEDULERS as BATCH

    registries = {
        "policy": (POLICIES, {"deadline-strict", "best-effort", "framework-horizontal"}),
        "market mechanism": (MECHANISMS, {"proportional-share", "tycoon", "posted"}),
        "economy": (ECONOMIES, {"themis", "closed"}),
        "charging": (CHARGING, {"bid", "use"}),
        "scheduler": (SCHEDULERS, {"fcfs", "edf", "easy", "conservative", "maui", "market"}),
        "backend": (BACKENDS, {"local", "kubernetes"}),
        "experiment": (EXPERIMENTS, {"themis-fig5", "merkat-fig6"}),
        "command": (NOUNS, {"sim", "bank", "policy", "server"}),
    }
    for kind, (reg, names) in registries.items():
        assert isinstance(reg, Registry) and reg.kind == kind
        assert names <= set(reg.names()), kind
        with pytest.raises(UnknownName) as err:
            reg.get("no-such")
        assert str(err.value) == (f"unknown {kind} 'no-such'; known: "
                                  f"{', '.join(sorted(reg.names()))}")
    assert isinstance(BATCH, Registry) and set(BATCH.names()) == {
        "fcfs", "edf", "easy", "conservative", "maui"}
    # each domain's own error still catches its unknown names
    for reg, domain in ((POLICIES, PolicyError), (MECHANISMS, MechanismError),
                        (ECONOMIES, EconomyError), (CHARGING, EconomyError)):
        with pytest.raises(domain):
            reg.get("no-such")


def test_an_unknown_name_on_the_command_line_is_exit_2_listing_the_known_ones() -> None:
    r = subprocess.run([sys.executable, "-m", "merkat", "sim", "experiment", "no-such",
                        "--out", "/nonexistent/x"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: unknown experiment 'no-such'; known: ")
    assert "themis-fig5" in r.stderr and "Traceback" not in r.stderr
