"""Each VM's working directory, the platform's shared directory, and the template's files in
and out (Merkat §4.1.1: "files copied in/from the VMs before/after the application is
started/stopped"; §4.2.2's configuration step: a shared file system).

Layout under the server's data directory::

    work/<platform>/shared/            MERKAT_SHARED: one directory all the platform's VMs see
    work/<platform>/<cluster>-<k>/     a VM's working directory (its command runs there)
    out/<platform>/<cluster>-<k>/      the files_out of that VM, copied when the platform ends

``files_in`` paths are read relative to the server's working directory (or absolute) and
copied into each VM's working directory before its command starts; ``files_out`` paths are
relative to the VM's working directory. A missing input is an error of that VM (reported as
data by the backend); a missing output is skipped and named in the returned list.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def work_dir(data: Path, platform: str, cluster: str, k: int) -> Path:
    return data / "work" / platform / f"{cluster}-{k}"


def shared_dir(data: Path, platform: str) -> Path:
    d = data / "work" / platform / "shared"
    d.mkdir(parents=True, exist_ok=True)
    return d


def stage_in(files: list[str], dest: Path) -> None:
    """Create ``dest`` and copy ``files`` into it (raises ``OSError`` naming a missing one)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        src = Path(f)
        if src.is_dir():
            shutil.copytree(src, dest / src.name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / src.name)
        else:
            raise FileNotFoundError(f"files_in: no such file {f!r}")


def stage_out(files: list[str], src: Path, dest: Path) -> list[str]:
    """Copy ``files`` (relative to ``src``) into ``dest``; returns those that were missing."""
    missing = []
    for f in files:
        p = src / f
        target = dest / f
        if p.is_dir():
            shutil.copytree(p, target, dirs_exist_ok=True)
        elif p.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
        else:
            missing.append(f)
    return missing
