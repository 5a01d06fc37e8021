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
    code. The fix is named in the error. Runs at every start, so it only lists the package's
    directories (``os.scandir``, no recursive glob, no pathlib)."""
    import os

    stack = [os.path.dirname(__file__)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__" and e.name != "data":
                        stack.append(e.path)
                elif e.name.endswith(".so"):
                    source = os.path.join(os.path.dirname(e.path), e.name.split(".", 1)[0] + ".py")
                    if os.path.exists(source) and os.stat(source).st_mtime > e.stat().st_mtime:
                        raise ImportError(
                            f"merkat: {source} changed after the compiled build ({e.name}): "
                            "run `make compiled` again, or `make pure` to use the sources"
                        )


def compiled() -> bool:
    """Whether the simulation core runs compiled (``make compiled``): where the import system
    finds ``merkat.platform.period`` (an extension module, or its source), without running it
    (this root module imports nothing of merkat: docs/architecture.md, "Layers")."""
    import importlib.util

    spec = importlib.util.find_spec("merkat.platform.period")
    return spec is not None and not (spec.origin or "").endswith(".py")


_check_compiled()
