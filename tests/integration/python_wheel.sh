#!/usr/bin/env bash
# The Python package as a user installs it: build kiln's wheel from this tree
# (pyproject.toml, scikit-build-core) with the CUDA toolkit hidden, install it
# into a FRESH venv that reaches torch (and NVIDIA's nvrtc/nccl wheels) only
# through a .pth file pointing at the test venv's site-packages (torch is not
# reinstalled), and with the toolkit still hidden and no LD_LIBRARY_PATH,
# PYTHONPATH, KILN_LIBRARY or KILN_EXE:
#   - `kiln --version` (the console script) finds NVRTC in the nvidia wheels of
#     the .pth'd site-packages (kiln/_paths.py: not the fresh venv's sys.prefix);
#   - `python -m kiln build --arch 90 --kernels 'bias_*'` fills a cache (the
#     three smallest units: the wheel's NVRTC is another toolchain than the
#     fixtures', so whatever runs here is compiled here);
#   - `import kiln` loads the package's own libkiln;
#   - python/tests/test_api.py and test_ops.py's tests of the bias_* ops (on
#     the fake driver) pass against the installed package: the package and its
#     libkiln as installed; every op is tested against the build tree by
#     python.ops.
# Prints the wheel's build time, its size and the installed size.
#
# The interpreter is IT_TEST_PYTHON (KILN_TEST_PYTHON: scripts/python-env's
# venv with torch, scikit-build-core, ninja, pytest); the wheel is built
# without build isolation (no network), its CMake build directory kept in the
# build tree (python-wheel-build) so a rerun rebuilds only what changed.
. "$(dirname "$0")/lib.sh" "$@"

require_masking
py=${IT_TEST_PYTHON:-}
[[ -n $py && -x $py ]] || skip "no torch venv: configure with -DKILN_TEST_PYTHON=\$(scripts/python-env)"
"$py" -c 'import torch, pytest, numpy, scikit_build_core' 2>/dev/null ||
  skip "$py lacks torch, pytest, numpy or scikit-build-core (scripts/python-env installs them)"
[[ -n ${IT_FAKECUDA:-} && -f $IT_FAKECUDA ]] || skip "no fake CUDA driver (tests/fakecuda needs a C++ compiler)"
src=${IT_SOURCE_DIR:?}
wheel_build=$(dirname "$KILN_BIN")/python-wheel-build
torch_site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_prefix=$("$py" -c 'import sys; print(sys.prefix)')
[[ -d $torch_site/nvidia ]] || skip "$torch_site holds no nvidia wheels (torch from PyPI brings them)"

# masked (lib.sh): every /usr/local/cuda* hidden, and no CUDA or loader paths
# from the environment.
HIDE_ENV+=(LD_LIBRARY_PATH PYTHONPATH PYTHONHOME VIRTUAL_ENV)

log "the toolkit is hidden in the namespace"
masked bash -c 'ls -A /usr/local/cuda/ | wc -l; nvcc --version >/dev/null 2>&1 && echo nvcc-runs || echo no-nvcc' >"$OUT" 2>"$ERR" ||
  die "the namespace did not start: $(cat "$ERR")"
expect_eq "$(head -1 "$OUT")" 0 "files left under /usr/local/cuda"
expect_eq "$(tail -1 "$OUT")" no-nvcc "nvcc"
masked bash -c 'echo "#include <cuda.h>" | cc -E -x c - >/dev/null 2>&1' &&
  fail "cuda.h is still found with the toolkit hidden"

log "pip wheel . (scikit-build-core) without the toolkit"
mkdir -p "$T/dist"
start=$(date +%s.%N)
reused=fresh
[[ -f $wheel_build/CMakeCache.txt ]] && reused="build dir reused"
masked env -C "$src" "$py" -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check \
  -w "$T/dist" -C build-dir="$wheel_build" >"$T/wheel.log" 2>&1 || {
  tail -40 "$T/wheel.log" >&2
  die "pip wheel failed"
}
wheel_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
whl=$(ls "$T"/dist/kiln-*.whl)
version=$(sed -n 's/^project(kiln VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
expect_eq "$(basename "$whl")" "kiln-$version-py3-none-linux_x86_64.whl" "the wheel's name (version from CMakeLists.txt)"
python3 - "$whl" >"$OUT" <<'PY' || fail "the wheel's contents: $(cat "$OUT")"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"kiln/__init__.py", "kiln/_lib.py", "kiln/__main__.py", "kiln/torch/ops.py",
        "kiln/bin/kiln", "kiln/lib/libkiln.so.0.2", "kiln/lib/libkiln_torch.so"}
bad = sorted(n for n in names if n.endswith(".a") or n.endswith("libkiln.so") or "/include/" in n
             or n.startswith("kiln/lib/libkiln.so.0.2.") or "__pycache__" in n)
if need - names or bad:
    sys.exit(f"missing {sorted(need - names)}, unwanted {bad}")
PY

log "a fresh venv that reaches torch through a .pth file"
timeout 300 "$py" -m venv "$T/venv" >"$OUT" 2>"$ERR" || die "python -m venv failed: $(cat "$ERR")"
vpy=$T/venv/bin/python
vsite=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$torch_site" >"$vsite/kiln-test-torch.pth"
timeout 300 "$vpy" -m pip install -q --no-deps --no-index --disable-pip-version-check "$whl" >"$OUT" 2>"$ERR" ||
  die "pip install of the wheel failed: $(cat "$ERR")"
[[ -x $T/venv/bin/kiln ]] || fail "no kiln console script in the venv"
installed_kib=$(du -sk "$vsite/kiln" "$vsite"/kiln-*.dist-info | awk '{ s += $1 } END { print s }')
expect_eq "$(readelf -d "$vsite/kiln/bin/kiln" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')" '$ORIGIN/../lib' "kiln/bin/kiln's RUNPATH"
masked "$vpy" -c 'import torch, kiln, sys; print(torch.__file__); print(kiln.__file__); print(sys.prefix)' >"$OUT" 2>"$ERR" ||
  fail "import torch, kiln in the fresh venv: $(tail -3 "$ERR")"
expect_eq "$(sed -n 1p "$OUT")" "$torch_site/torch/__init__.py" "torch (from the .pth'd site-packages, not reinstalled)"
expect_eq "$(sed -n 2p "$OUT")" "$vsite/kiln/__init__.py" "kiln (the installed wheel)"
expect_eq "$(sed -n 3p "$OUT")" "$T/venv" "the fresh venv's sys.prefix"

log "kiln --version finds NVRTC and NCCL in the nvidia wheels of the .pth'd site-packages"
masked "$T/venv/bin/kiln" --version >"$OUT" 2>"$ERR" || fail "kiln --version failed: $(cat "$ERR")"
expect_stdout_contains "kiln $version"
expect_stdout_contains "(found by NVIDIA's wheels under $torch_prefix (KILN_PYTHON_PREFIX))"
grep -q "^NVRTC [0-9.]*: $torch_site/nvidia/.*libnvrtc.so" "$OUT" || fail "NVRTC not from $torch_site/nvidia: $(cat "$OUT")"
nvrtc_ver=$(sed -n 's/^NVRTC \([0-9.]*\): .*/\1/p' "$OUT")
# a prefix the user names wins
KILN_PYTHON_PREFIX=$T/nowhere masked "$T/venv/bin/kiln" --version >"$OUT" 2>"$ERR" || true
grep -q "under $torch_prefix (KILN_PYTHON_PREFIX)" "$OUT" && fail "KILN_PYTHON_PREFIX set by the user was overridden"

log "python -m kiln build --arch 90 --kernels 'bias_*'"
masked "$vpy" -m kiln build --arch 90 --kernels 'bias_*' --cache "$T/c" >"$OUT" 2>"$ERR" ||
  { fail "python -m kiln build failed"; sed 's/^/  stderr| /' "$ERR" | tail -20 >&2; }
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 3 "sm_90 records of the 3 bias_* units"
expect_eq "$(index_query "$T/c" "SELECT DISTINCT toolchain FROM records")" "nvrtc-$nvrtc_ver" "the records' toolchain (the wheel's NVRTC)"

log "import kiln with no LD_LIBRARY_PATH: the package's own libkiln"
masked "$vpy" -c 'import kiln, kiln._lib as L, sys
c = kiln.Cache(sys.argv[1], create=False)
print(kiln.__version__, c.stats()["records"], L.library_path())
print(kiln.probe(cache=sys.argv[1])["nvrtc"]["found_by"])' "$T/c" >"$OUT" 2>"$ERR" ||
  fail "import kiln failed: $(tail -3 "$ERR")"
expect_eq "$(sed -n 1p "$OUT")" "$version 3 $vsite/kiln/lib/libkiln.so.0.2" "version, records, libkiln"
expect_eq "$(sed -n 2p "$OUT")" "NVIDIA's wheels under $torch_prefix (KILN_PYTHON_PREFIX)" "probe's NVRTC"

log "python/tests against the installed package, on the fake driver"
cp "$IT_FAKECUDA" "$T/libkiln_fakecuda.so"
tests=("$src/python/tests/test_api.py")
[[ -f $src/python/tests/test_ops.py ]] && tests+=("$src/python/tests/test_ops.py")
mkdir -m 700 "$T/ops-cache"
KILN_CUDA_LIBRARY=$T/libkiln_fakecuda.so KILN_FAKE_CUDA_HOST_MEMORY=1 KILN_CACHE_DIR=$T/ops-cache \
  PYTHONDONTWRITEBYTECODE=1 masked env -C "$T" "$vpy" -m pytest -q -p no:cacheprovider \
  --basetemp="$T/pytest" -k 'not test_ops.py or bias_gelu or bias_swiglu or dropout' "${tests[@]}" >"$OUT" 2>&1 || {
  fail "pytest ${tests[*]##*/} failed against the installed package"
  tail -40 "$OUT" >&2
}
log "pytest: $(tail -1 "$OUT")"

log "the installed package's fast path: its libkiln_torch, torch's shim"
masked env -C "$T" "$vpy" -c 'import kiln.torch as kt; i = kt.info(); print(i["fast"], len(i["c_ops"]))' \
  >"$OUT" 2>"$ERR" || fail "kiln.torch.info() failed: $(tail -3 "$ERR")"
# every kiln:: op but philox_seed_offset (docs/python.md, "The fast path"):
# the test venv's torch has every optional shim symbol
expect_eq "$(tail -1 "$OUT")" "True 23" "kiln.torch.info(): the fast path and its ops"

printf '%s: wheel %s KiB, built in %s s (%s, toolkit hidden); installed %s KiB\n' "$TEST_NAME" \
  "$(($(stat -c %s "$whl") / 1024))" "$wheel_s" "$reused" "$installed_kib"
