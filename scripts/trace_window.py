"""A window of a trace's jobs as an SWF file: its header and ``COUNT`` job lines from job
``FIRST`` (0-based, in file order), on stdout. The benchmarks' busy middle of HPC2N
(docs/benchmarks.md, issue 28, "w3k.swf") is

    PYTHONPATH=src python scripts/trace_window.py HPC2N-2002-2.2-cln 120000 3000 > w3k.swf
    merkat bench period --jobs 0 --trace w3k.swf
"""

from __future__ import annotations

import argparse
import gzip
import sys

from merkat.workload.traces import TraceNotFound, find_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="a trace name (merkat traces list) or an SWF file")
    ap.add_argument("first", type=int, help="the first job line kept (0-based)")
    ap.add_argument("count", type=int, help="how many job lines")
    args = ap.parse_args()
    if args.first < 0 or args.count < 1:
        ap.error("first must be >= 0 and count >= 1")
    try:
        path = find_trace(args.trace)
    except TraceNotFound as e:
        ap.error(str(e))  # one line, exit 2
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        lines = f.read().splitlines()
    header = [ln for ln in lines if ln.startswith(";")]
    jobs = [ln for ln in lines if ln.strip() and not ln.startswith(";")]
    sys.stdout.write("\n".join(header + jobs[args.first:args.first + args.count]) + "\n")


if __name__ == "__main__":
    main()
