#!/bin/sh
# Print the Python interpreter `make` builds .venv with (the Makefile's PYTHON; set PYTHON=...
# to choose another). Candidates, in order: python3.11, /usr/bin/python3.11,
# /usr/local/bin/python3.11, python3 (or those named in PYTHON_CANDIDATES). A candidate must be
# CPython >= 3.11 and able to make a venv with pip (`import venv, ensurepip`; on Debian the
# python3.11-venv package). Among those, the first whose interpreter is linked statically
# (does not load libpython*.so) wins, else the first that works: an interpreter built with
# --enable-shared calls its own C API through the shared library and runs merkat's Python-bound
# loops ~15 % slower (docs/benchmarks.md, "The interpreter of the default install"). Linux
# tells by /proc/self/maps; elsewhere the first candidate that works is taken.
# Exit 1 with a message on stderr when none works.
set -u
first=""
for c in ${PYTHON_CANDIDATES:-python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11 python3}; do
    command -v "$c" >/dev/null 2>&1 || continue
    # its own path (a pyenv shim or a symlink gives the real one) and whether it is static,
    # asked in one start
    out=$("$c" -c 'import sys, venv, ensurepip
if sys.version_info < (3, 11) or sys.implementation.name != "cpython":
    raise SystemExit(1)
try:
    static = "libpython" not in open("/proc/self/maps").read()
except OSError:
    static = False
print(static, sys.executable)' 2>/dev/null) || continue
    static=${out%% *}
    exe=${out#* }
    [ -n "$exe" ] || continue
    [ -n "$first" ] || first=$exe
    if [ "$static" = "True" ]; then
        echo "$exe"
        exit 0
    fi
done
if [ -n "$first" ]; then
    echo "$first"
    exit 0
fi
echo "pick-python: no CPython >= 3.11 that can make a venv with pip was found" \
     "(tried: ${PYTHON_CANDIDATES:-python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11 python3});" \
     "install one (Debian: apt-get install python3.11 python3.11-venv) or run make PYTHON=/path/to/python3.11" >&2
exit 1
