"""merkat — a market-based resource manager for shared clusters.

Packages (each concept of the papers lives in one of them):

- :mod:`merkat.market`  proportional-share market, placement, load balancing (pure)
- :mod:`merkat.bank`    ledger, accounts, budgets, charging, transfer tokens
- :mod:`merkat.sim`     discrete-event simulator, SWF traces, Lublin model, batch baselines
- :mod:`merkat.control` application controllers and SLO policies (pure)
- :mod:`merkat.cli`     the ``merkat`` command
"""

__version__ = "0.1.0"


def _check_compiled() -> None:
    """Refuse a compiled module (``make compiled``) older than its source: it would run stale
    code. The fix is named in the error."""
    from pathlib import Path

    root = Path(__file__).parent
    for ext in root.rglob("*.so"):
        source = ext.with_name(ext.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > ext.stat().st_mtime:
            raise ImportError(
                f"merkat: {source} changed after the compiled build ({ext.name}): "
                "run `make compiled` again, or `make pure` to use the sources"
            )


def compiled() -> bool:
    """Whether the simulation core runs compiled (``make compiled``)."""
    from merkat.platform import period

    return not (period.__file__ or "").endswith(".py")


_check_compiled()
