"""Where the bundled workload traces are: ``$MERKAT_TRACES``, else ``shared/traces`` beside the
checkout (the layout of this project's development and CI machines)."""

from __future__ import annotations

import os
from pathlib import Path

HPC2N = "HPC2N-2002-2.2-cln.swf.gz"
LUBLIN_256 = "lublin_256.swf"


def trace_dirs() -> list[Path]:
    """Directories searched for a trace given by name, in order."""
    dirs: list[Path] = []
    env = os.environ.get("MERKAT_TRACES")
    if env:
        dirs.append(Path(env))
    repo = Path(__file__).resolve().parents[3]  # src/merkat/sim/traces.py -> checkout
    dirs += [
        repo.parent / "shared" / "traces",
        Path.cwd().parent / "shared" / "traces",
        Path.cwd() / "traces",
    ]
    return dirs


def find_trace(name: str) -> Path:
    """The path of trace ``name`` (a file name or a path); FileNotFoundError naming the
    places searched and how to point merkat at the traces."""
    direct = Path(name)
    if direct.is_file():
        return direct
    for d in trace_dirs():
        if (d / name).is_file():
            return d / name
    searched = ", ".join(str(d) for d in trace_dirs())
    raise FileNotFoundError(
        f"trace {name!r} not found (searched: {searched}); set MERKAT_TRACES to the folder "
        "holding the SWF traces or give a path"
    )
