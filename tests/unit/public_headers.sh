#!/usr/bin/env bash
# Compiles every public header (include/kiln/*.h) alone in a translation unit
# of its own, as C11 and as C++17, with -Wall -Wextra -Wpedantic -Werror; the C
# unit also expands every _INIT macro the header defines.
# Usage: public_headers.sh INCLUDE_DIR CC CXX
set -euo pipefail
inc=$1 cc=$2 cxx=$3
command -v "$cxx" >/dev/null || { echo "SKIP: no C++ compiler ($cxx)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 n=0
for h in "$inc"/kiln/*.h; do
  name=$(basename "$h" .h)
  {
    echo "#include \"kiln/$name.h\""
    # each KILN_X_OPTIONS_INIT of this header, expanded into its struct
    { grep -oE '^#define KILN_[A-Z_]+_OPTIONS_INIT' "$h" || true; } | awk '{print $2}' | while read -r m; do
      t=$(echo "$m" | sed -E 's/^KILN_([A-Z_]+)_OPTIONS_INIT$/\1/' | tr 'A-Z' 'a-z')
      echo "kiln_${t}_options use_${t}(void);"
      echo "kiln_${t}_options use_${t}(void) { kiln_${t}_options o = $m; return o; }"
    done
    echo "int kiln_header_$name(void);"
    echo "int kiln_header_$name(void) { return 0; }"
  } >"$work/$name.c"
  printf '#include "kiln/%s.h"\nint kiln_header_%s();\nint kiln_header_%s() { return 0; }\n' \
    "$name" "$name" "$name" >"$work/$name.cpp"
  n=$((n + 1))
  if ! "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$work/$name.c" -o "$work/$name.c.o"; then
    echo "FAIL: kiln/$name.h as C11"; fail=1
  fi
  if ! "$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$work/$name.cpp" -o "$work/$name.cpp.o"; then
    echo "FAIL: kiln/$name.h as C++17"; fail=1
  fi
done
echo "public headers: $n checked as C11 and C++17"
exit $fail
