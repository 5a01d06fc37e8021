"""The parsed-trace cache (``merkat.workload.swf_cache``): a large clean trace is parsed once
and loaded bit for bit after; a changed file, a corrupt or foreign entry and an unwritable
cache only cost a parse; a trace with bad lines is never kept, so ``strict`` and the bad lines'
messages still come from the text."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from merkat.workload import swf, swf_cache
from merkat.workload.swf import SwfError, read_swf

N = swf_cache.MIN_JOBS


def write_trace(path: Path, jobs: int, seed: int = 0, bad: str | None = None) -> None:
    rng = np.random.default_rng(seed)
    rows = np.column_stack([np.arange(1, jobs + 1), np.cumsum(rng.integers(0, 60, jobs)),
                            rng.integers(0, 9, (jobs, 16))]).astype(np.int64)
    lines = [" ".join(map(str, r)) for r in rows]
    if bad is not None:
        lines[jobs // 2] = bad
    text = "; MaxProcs: 240\n; Note: first\n; Note: second\n" + "\n".join(lines) + "\n"
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(swf_cache.ENV, raising=False)
    return tmp_path / "xdg" / "merkat" / "parsed"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the text was parsed."""
    seen: list[int] = []
    original = swf.parse_swf

    def counted(raw: bytes, name: str = "<memory>", strict: bool = False) -> swf.SwfTrace:
        seen.append(len(raw))
        return original(raw, name=name, strict=strict)

    monkeypatch.setattr(swf, "parse_swf", counted)
    return seen


@pytest.mark.parametrize("name", ["t.swf", "t.swf.gz"])
def test_a_large_trace_is_parsed_once_and_loaded_bit_for_bit(
        cache: Path, parses: list[int], tmp_path: Path, name: str) -> None:
    p = tmp_path / name
    write_trace(p, N)
    first = read_swf(p)
    assert len(parses) == 1 and len(list(cache.glob("*.npz"))) == 1
    again = read_swf(p)
    assert len(parses) == 1  # loaded, not parsed
    assert again.data.tobytes() == first.data.tobytes() and again.data.dtype == np.float64
    assert again.header == first.header == {"MaxProcs": "240", "Note": "first\nsecond"}
    assert (again.path, again.skipped, again.bad_lines) == (str(p), 0, [])
    again.data[0, 0] = -5.0  # a fresh array each load: writing into it changes no other load
    assert read_swf(p).data[0, 0] == 1.0


def test_a_changed_file_is_parsed_again(cache: Path, parses: list[int], tmp_path: Path) -> None:
    p = tmp_path / "t.swf"
    write_trace(p, N, seed=1)
    before = read_swf(p)
    write_trace(p, N + 1, seed=2)
    os.utime(p, ns=(1, 1))  # another size and modification time
    after = read_swf(p)
    assert len(parses) == 2 and len(after) == N + 1
    assert not np.array_equal(after.data[:N], before.data)


def test_a_corrupt_or_foreign_entry_is_a_miss_and_is_rewritten(
        cache: Path, parses: list[int], tmp_path: Path) -> None:
    p = tmp_path / "t.swf"
    write_trace(p, N)
    want = read_swf(p).data.tobytes()
    (entry,) = cache.glob("*.npz")
    for junk in (b"", b"not a zip file", entry.read_bytes()[:1000]):
        entry.write_bytes(junk)
        assert read_swf(p).data.tobytes() == want
    q = tmp_path / "other.swf"  # another trace's entry under this trace's name
    write_trace(q, N, seed=7)
    read_swf(q)
    (other,) = set(cache.glob("*.npz")) - {entry}
    entry.write_bytes(other.read_bytes())
    assert read_swf(p).data.tobytes() == want
    assert len(parses) == 6  # the first read, three corrupt, the other trace, the foreign one
    assert read_swf(p).data.tobytes() == want and len(parses) == 6  # rewritten whole


def test_bad_lines_are_never_kept_and_strict_still_names_the_line(
        cache: Path, parses: list[int], tmp_path: Path) -> None:
    p = tmp_path / "t.swf"
    write_trace(p, N + 1, bad="1 2 3")
    for _ in range(2):
        t = read_swf(p)
        assert (len(t), t.skipped) == (N, 1) and "expected 18 fields, found 3" in t.bad_lines[0]
    assert not cache.exists() or not list(cache.glob("*.npz"))
    with pytest.raises(SwfError, match=r"t\.swf:\d+: expected 18 fields"):
        read_swf(p, strict=True)


def test_small_traces_are_not_kept_and_the_cache_can_be_turned_off(
        cache: Path, parses: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = tmp_path / "small.swf"
    write_trace(small, N - 1)
    read_swf(small)
    assert not cache.exists()
    monkeypatch.setenv(swf_cache.ENV, "off")
    p = tmp_path / "t.swf"
    write_trace(p, N)
    read_swf(p)
    read_swf(p)
    assert len(parses) == 3 and not cache.exists()


def test_a_full_disk_only_costs_the_parse_and_leaves_no_partial_entry(
        cache: Path, parses: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(f: object, **arrays: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(swf_cache.np, "savez", full)
    p = tmp_path / "t.swf"
    write_trace(p, N)
    assert len(read_swf(p)) == N and len(read_swf(p)) == N and len(parses) == 2
    assert list(cache.iterdir()) == []  # the temporary file removed


def test_a_cache_path_that_is_a_file_only_costs_the_parse(
        cache: Path, parses: list[int], tmp_path: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"a file where the folder should be")
    p = tmp_path / "t.swf"
    write_trace(p, N)
    assert len(read_swf(p)) == N and len(read_swf(p)) == N and len(parses) == 2


def test_entries_of_gone_or_changed_traces_and_the_oldest_beyond_the_bound_are_dropped(
        cache: Path, parses: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone, changed = tmp_path / "gone.swf", tmp_path / "changed.swf"
    for k, p in enumerate((gone, changed)):
        write_trace(p, N, seed=k)
        read_swf(p)
    gone.unlink()
    write_trace(changed, N + 1, seed=9)
    os.utime(changed, ns=(1, 1))
    (cache / "dead.tmp").write_bytes(b"x")
    os.utime(cache / "dead.tmp", (0, 0))  # left by a writer that died long ago
    (cache / "bad.npz").write_bytes(b"corrupt")
    kept = tmp_path / "kept.swf"
    write_trace(kept, N, seed=5)
    read_swf(kept)  # a write: prunes the others
    assert len(list(cache.iterdir())) == 1  # only kept.swf's
    kept.unlink()  # its entry goes at the next write
    monkeypatch.setattr(swf_cache, "MAX_ENTRIES", 3)
    paths = [tmp_path / f"t{k}.swf" for k in range(4)]
    seen = set(cache.glob("*.npz"))
    for k, p in enumerate(paths):
        write_trace(p, N, seed=10 + k)
        read_swf(p)
        (new,) = set(cache.glob("*.npz")) - seen
        os.utime(new, (1e9 + k, 1e9 + k))  # distinct ages, the newest last
        seen = set(cache.glob("*.npz"))
    assert len(seen) == 3
    n = len(parses)
    for p in paths[-3:]:
        read_swf(p)
    assert len(parses) == n  # the three newest kept


def test_an_unknown_cache_setting_is_bad_input_naming_the_variable(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in MERKAT_TRACE_CACHE is refused with the values it takes, not read as on; the
    command line exits 2 with one line and no traceback."""
    p = tmp_path / "t.swf"
    write_trace(p, N)
    monkeypatch.setenv(swf_cache.ENV, "of")
    with pytest.raises(SwfError, match="MERKAT_TRACE_CACHE: must be on or off, got 'of'"):
        read_swf(p)
    assert not cache.exists()  # nothing read or written
    monkeypatch.setenv(swf_cache.ENV, " ON ")
    assert len(read_swf(p)) == N and len(list(cache.glob("*.npz"))) == 1
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "merkat", "bench", "period", "--jobs", "20"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, swf_cache.ENV: "maybe"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert "MERKAT_TRACE_CACHE: must be on or off, got 'maybe'" in r.stderr
