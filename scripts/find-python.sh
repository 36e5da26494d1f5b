#!/usr/bin/env bash
# find-python.sh: prints the path of a Python 3 that imports mpi4py and NumPy, and, with an
# argument, whose mpi4py was built against that MPI ("Open MPI" or "MPICH"). Tries $PYTHON,
# python3 on the PATH, then /usr/bin/python3 (Debian's python3-mpi4py and python3-numpy live
# there; a pyenv or venv python3 earlier on the PATH may lack them). Exits 1 when none fits.
#
# usage: scripts/find-python.sh [VENDOR]
set -uo pipefail
vendor=${1:-}
probe='import sys, numpy, mpi4py
mpi4py.rc.initialize = False  # importing MPI must not start MPI here
from mpi4py import MPI
sys.exit(0 if sys.argv[1] in MPI.get_vendor()[0] else 3)'
for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
    [[ -n $candidate ]] || continue
    path=$(command -v "$candidate" 2> /dev/null) || continue
    if "$path" -c "$probe" "$vendor" > /dev/null 2>&1; then
        echo "$path"
        exit 0
    fi
done
exit 1
