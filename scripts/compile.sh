#!/usr/bin/env bash
# Build merkat's simulation core with mypyc (optional; `make compiled`, undone by `make pure`).
#
# The same sources, compiled to C extensions placed next to them (Python imports a module's
# extension before its .py): the period loop, the controllers, the simulated backend and the
# market's load balancer run about 1.5x faster, with identical results (tests/test_compiled.py
# checks byte-identical simulation outputs). merkat refuses to import a compiled module older
# than its source (merkat/__init__.py), so an edit never runs stale code.
#
# usage: scripts/compile.sh [SRC_DIR]   (default: this checkout's src/)
set -euo pipefail
SRC="${1:-$(cd "$(dirname "$0")/.." && pwd)/src}"
PY="${PYTHON:-python}"
MODULES=(
  merkat/control/types.py merkat/control/formulas.py merkat/control/base.py
  merkat/control/generic.py merkat/control/deadline.py merkat/control/slo.py
  merkat/control/utility.py
  merkat/platform/period.py merkat/platform/plan.py merkat/platform/bids.py
  merkat/platform/backend.py
  merkat/backends/sim.py
  merkat/market/balance.py merkat/market/share.py
)
cd "$SRC"
mkdir -p build
# --ignore-missing-imports: as in pyproject (scipy has no stubs; the config is not read from src/)
if ! "$PY" -m mypyc --ignore-missing-imports "${MODULES[@]}" > build/mypyc.log 2>&1; then
  tail -n 30 build/mypyc.log >&2
  echo "compile.sh: mypyc failed (full log: $SRC/build/mypyc.log)" >&2
  exit 1
fi
# setuptools keeps unchanged extension shims as they were: mark the whole build as new
for m in "${MODULES[@]}"; do touch "${m%.py}".*.so; done
echo "compiled ${#MODULES[@]} modules in $SRC (log: $SRC/build/mypyc.log)" >&2
