"""An iterative CPU-bound solver (Zephyr-like, Merkat §5.3): each iteration burns a fixed
amount of CPU time, so its wall time is that amount divided by the CPU share the market gives
it. Logs each iteration's time and the elapsed time:

    iteration 3/40 time 0.512 elapsed 1.601

Usage: python -m merkat.examples.solver [--iterations N] [--cost SECONDS_OF_CPU_PER_ITERATION]
"""

from __future__ import annotations

import argparse
import time


def burn(cpu_seconds: float) -> None:
    end = time.process_time() + cpu_seconds
    x = 0
    while time.process_time() < end:
        for _ in range(10_000):
            x += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--cost", type=float, default=0.5)
    args = ap.parse_args()
    t0 = time.monotonic()
    for i in range(1, args.iterations + 1):
        start = time.monotonic()
        burn(args.cost)
        now = time.monotonic()
        print(f"iteration {i}/{args.iterations} time {now - start:.3f} elapsed {now - t0:.3f}",
              flush=True)


if __name__ == "__main__":
    main()
