"""The compiled proportional share (merkat.market.share_kernel) against its numpy reference
(merkat.market.share.proportional_share_numpy): every output array byte for byte (signs of
zeros included) on random markets — caps binding or not, zero and infinite caps, bids of 0,
zero capacity, empty groups, one group, subnormal prices, ties of bid per unit of cap."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.market import share, share_kernel

pytestmark = pytest.mark.skipif(not share_kernel.available(), reason="numba not installed")


def _market(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(share_kernel.MIN_VMS, 400))
    n_groups = int(rng.integers(1, 60))
    b = rng.choice([0.0, 0.5, 1.0, 2.0, 3.7], size=n) * rng.choice([1.0, 1e-300, 1e3], size=n)
    if seed % 4 == 0:
        b = rng.uniform(0.0, 5.0, n)  # no ties
    m = rng.choice([0.0, 0.25, 1.0, 2.0, np.inf], size=n, p=[0.05, 0.2, 0.4, 0.2, 0.15])
    cap = rng.choice([0.0, 1.0, 2.0, 8.0, 1e12], size=n_groups, p=[0.1, 0.4, 0.2, 0.2, 0.1])
    group = None if seed % 5 == 0 else rng.integers(0, n_groups, n)
    if seed % 7 == 0:
        group = np.zeros(n, dtype=np.int64)
    return b, m, cap, group


def _bytes(s: share.Shares) -> list[bytes]:
    return [np.ascontiguousarray(a).tobytes() for a in
            (s.allocation, s.price, s.capped, s.uncapped_bids, s.capacity_left)]


@pytest.mark.parametrize("seed", range(200))
def test_the_compiled_share_is_the_numpy_reference_byte_for_byte(seed: int) -> None:
    b, m, cap, group = _market(seed)
    cap_g = np.atleast_1d(cap)
    g = np.zeros(len(b), dtype=np.int64) if group is None else group
    got = share.Shares(*share_kernel.compiled_share(b, m, cap_g, g, 1.0 + share._RTOL,
                                                     share._TINY))
    want = share.proportional_share_numpy(b, m, cap_g, group)
    assert _bytes(got) == _bytes(want)


def test_the_kernel_serves_large_markets_and_checks_its_groups(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With MERKAT_KERNELS=numba a market of MIN_VMS VMs or more goes to the kernel; group
    indices out of range go to the reference (whose error or answer they get), never into
    the compiled loop; without it, every market goes to the reference."""
    monkeypatch.setenv("MERKAT_KERNELS", "numba")
    calls = []
    real = share_kernel.compiled_share
    monkeypatch.setattr(share_kernel, "compiled_share",
                        lambda *a: calls.append(1) or real(*a))
    n = share_kernel.MIN_VMS
    share.proportional_share(np.ones(n), np.ones(n), [4.0, 4.0], np.arange(n) % 2)
    assert calls == [1]
    share.proportional_share(np.ones(n - 1), np.ones(n - 1), [4.0], None)
    assert calls == [1]  # small: the reference
    with pytest.raises((IndexError, ValueError)):
        share.proportional_share(np.ones(n), np.ones(n), [4.0, 4.0], np.arange(n) - 1)
    assert calls == [1]
    monkeypatch.delenv("MERKAT_KERNELS")
    share.proportional_share(np.ones(n), np.ones(n), [4.0, 4.0], np.arange(n) % 2)
    assert calls == [1]  # the default: the reference


def test_an_unknown_kernel_choice_is_bad_input_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in MERKAT_KERNELS is refused with the values it takes, not silently ignored;
    the command line exits 2 with one line."""
    from merkat.market import share_kernel
    from merkat.market.types import MarketError

    monkeypatch.setenv("MERKAT_KERNELS", "numbaa")
    with pytest.raises(MarketError, match="MERKAT_KERNELS: must be one of numpy, numba, got 'numbaa'"):
        share_kernel.enabled()
    monkeypatch.setenv("MERKAT_KERNELS", "NumPy")
    assert share_kernel.enabled() is False
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "merkat", "bench", "period", "--jobs", "20"],
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "MERKAT_KERNELS": "numbaa"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: MERKAT_KERNELS: must be one of")
    assert "Traceback" not in r.stderr
