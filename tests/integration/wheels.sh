# Python virtual environments holding NVIDIA's wheels (the NVRTC and NCCL that
# PyTorch users have), for the tests that load kiln's GPU libraries from them.
# Source it after lib.sh:
#
#   . "$(dirname "$0")/wheels.sh"
#   venv=$(wheel_venv nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86)
#   lib=$(wheel_lib "$venv" libnvrtc.so.12)      # the library's path inside it
#
# A venv is made once, from PyPI, under $IT_WHEEL_CACHE (default
# ~/.cache/kiln-test-wheels; outside the test's $T, so a rerun reuses it: these
# wheels are 60-100 MB each) and reused while its requirements are unchanged.
# Concurrent tests asking for the same venv wait for one another (flock).
IT_WHEEL_CACHE=${IT_WHEEL_CACHE:-$HOME/.cache/kiln-test-wheels}

# wheel_venv NAME REQUIREMENT...: prints the venv's path; dies if pip fails.
wheel_venv() {
  local name=$1 dir stamp want
  shift
  dir=$IT_WHEEL_CACHE/$name
  stamp=$dir/.kiln-requirements
  want="$*"
  mkdir -p "$IT_WHEEL_CACHE"
  (
    flock -w 900 9 || die "wheel_venv $name: the lock on $IT_WHEEL_CACHE/$name.lock was held for 900 s"
    if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $dir/bin/python ]]; then exit 0; fi
    rm -rf "$dir"
    log "making the venv $name ($want) under $IT_WHEEL_CACHE: once, then reused" >&2
    timeout 120 python3 -m venv "$dir" >&2 || die "wheel_venv $name: python3 -m venv failed"
    timeout 900 "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2 ||
      die "wheel_venv $name: pip install $want failed (PyPI must be reachable)"
    printf '%s' "$want" >"$stamp"
  ) 9>"$IT_WHEEL_CACHE/$name.lock" || exit 1
  printf '%s\n' "$dir"
}

# wheel_lib VENV SONAME: the one file named SONAME under VENV's site-packages/nvidia.
wheel_lib() {
  local found
  found=$(find "$1"/lib/python3*/site-packages/nvidia -name "$2" \( -type f -o -type l \) | head -1)
  [[ -n $found ]] || die "wheel_lib: no $2 in $1"
  printf '%s\n' "$found"
}
