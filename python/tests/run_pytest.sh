#!/usr/bin/env bash
# Runs pytest on files of python/tests for ctest (python/tests/CMakeLists.txt):
#
#   run_pytest.sh PYTHON SOURCE_DIR LIBKILN KILN_EXE FAKE_LIBCUDA MODULES TEST_FILE...
#
# PYTHON is KILN_TEST_PYTHON (scripts/python-env makes one), or --oldest
# (scripts/python-env --oldest: torch 2.4.1); MODULES the
# comma-separated modules the files import (pytest,torch). Without such an
# interpreter the test is skipped (exit 77) with a one-line reason. The
# package comes from SOURCE_DIR/python, libkiln and the kiln command from the
# build tree, the CUDA driver is the fake one (tests/fakecuda) with host
# memory as device memory, and the cache is a private temp directory (with
# the kernels fixture as a read-only layer when IT_KERNELS_LAYER names it).
set -euo pipefail
py=$1 src=$2 lib=$3 exe=$4 fakecuda=$5 modules=$6
shift 6

# PYTHON --oldest: the venv with the oldest torch the package supports,
# made by scripts/python-env --oldest (or waited for, while scripts/test's
# background call makes it).
# A venv that cannot be made (PyPI unreachable, the disk full: about 5 GB)
# is a skip that says why, not a failure of kiln's: the other tests still
# decide the run.
if [[ $py == --oldest ]]; then
  py=$("$src/scripts/python-env" --oldest) ||
    { echo "SKIP: scripts/python-env --oldest could not make the oldest torch's venv (PyPI must be reachable, about 5 GB free)"; exit 77; }
fi
if [[ -z $py || $py == *-NOTFOUND ]]; then
  echo "SKIP: KILN_TEST_PYTHON is not set (configure with -DKILN_TEST_PYTHON=\$(scripts/python-env))"
  exit 77
fi
[[ -x $py ]] || { echo "SKIP: KILN_TEST_PYTHON=$py is not an executable"; exit 77; }
missing=$("$py" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1].split(",") if importlib.util.find_spec(m) is None))' "$modules")
if [[ -n $missing ]]; then
  echo "SKIP: $py lacks $missing (scripts/python-env installs them)"
  exit 77
fi

# The operator's KILN_* settings must not leak in (as tests/integration/lib.sh).
for v in $(compgen -e | grep '^KILN_' || true); do unset "$v"; done
# IT_TORCH_FAST (ctest sets it for python.ops_fallback): KILN_TORCH_FAST, so
# the same op tests run on the Python path (docs/python.md, "The fast path").
if [[ -n ${IT_TORCH_FAST:-} ]]; then
  export KILN_TORCH_FAST=$IT_TORCH_FAST
fi
# IT_KERNELS_LAYER (ctest sets it for the files about ops): the kernels
# fixture, a read-only layer, so that the ops load rather than compile.
if [[ -n ${IT_KERNELS_LAYER:-} ]]; then
  [[ -f $IT_KERNELS_LAYER/index.sqlite ]] || { echo "no kernels fixture at $IT_KERNELS_LAYER (integration.fixture_kernels)"; exit 1; }
  export KILN_CACHE_PATH=$IT_KERNELS_LAYER
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-pytest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -m 700 "$tmp/cache"
export KILN_CACHE_DIR=$tmp/cache XDG_CACHE_HOME=$tmp/xdg
export PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}
export KILN_LIBRARY=$lib KILN_EXE=$exe KILN_CUDA_LIBRARY=$fakecuda KILN_FAKE_CUDA_HOST_MEMORY=1
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the source tree
cd "$src"
rc=0
"$py" -m pytest -q -p no:cacheprovider --basetemp="$tmp/pytest" "$@" || rc=$?
# 5: nothing collected, as when a file skips itself whole (test_ops_cuda.py
# without a GPU): a skip for ctest, not a failure.
[[ $rc == 5 ]] && exit 77
exit "$rc"
