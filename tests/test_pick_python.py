"""``scripts/pick-python.sh``: the interpreter ``make`` builds .venv with.

It takes the first CPython >= 3.11 that can make a venv with pip, a statically linked one
(no libpython*.so loaded) before one built with --enable-shared, and fails with a message
naming what it tried and how to choose when none works.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pick-python.sh"


def _pick(candidates: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHON_CANDIDATES=candidates)
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def _loads_libpython(exe: str) -> bool:
    out = subprocess.run([exe, "-c", "print('libpython' in open('/proc/self/maps').read())"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_none_that_works_is_an_error_naming_what_was_tried(tmp_path: Path) -> None:
    old = tmp_path / "python3.9"  # an interpreter too old for merkat
    old.write_text("#!/bin/sh\nexec false\n")
    old.chmod(0o755)
    r = _pick(f"no-such-python {old}")
    assert r.returncode == 1
    assert r.stdout == ""
    assert "no-such-python" in r.stderr and str(old) in r.stderr
    assert "PYTHON=" in r.stderr


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux: /proc/self/maps")
def test_a_static_interpreter_wins_over_an_earlier_shared_one(tmp_path: Path) -> None:
    """With only the running interpreter the pick is it; a shared-libpython interpreter named
    first loses to a static one named after it (when this machine has both)."""
    me = os.path.realpath(sys.executable)
    r = _pick(me)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == me
    found = {}
    for exe in ("/usr/bin/python3.11", *(str(p) for p in
                Path(os.path.expanduser("~/.pyenv/versions")).glob("3.11*/bin/python3.11"))):
        if os.access(exe, os.X_OK) and _pick(exe).returncode == 0:
            found.setdefault(_loads_libpython(exe), exe)
    if len(found) < 2:
        pytest.skip("needs a static and a shared CPython 3.11 that can make a venv")
    r = _pick(f"{found[True]} {found[False]}")
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(found[False])
