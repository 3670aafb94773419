#!/usr/bin/env bash
# The file-state matrix of issue 20 (file_states.py generates and runs it):
# every file and directory of a cache (index, WAL, SHM, a blob, a fan-out
# directory, tmp/, quarantine/, a read-only layer's index and blob) in turn a
# FIFO, a symlink out of the cache, a directory, an empty, truncated, garbage,
# 4 GiB sparse and unreadable file, a read-only directory, under every command
# and the loader (fake driver); and (issue 27) every file and directory of a
# file:// remote the fixture was uploaded into (the directory, ac/, cas/, a
# record, a blob, a stale temp file) in the same states, under a fetch into an
# empty cache (kiln build; the offline loader), an upload, doctor and
# cache gc --remote. Each case must end inside its command's bound with exit
# 0, 1 or 2, name the file when it fails, touch nothing outside the cache or
# the remote's directory, hand the driver only the fixture's own images and
# store no bytes but the fixture's. FILE_STATES_ONLY=GLOB runs a subset;
# FILE_STATES_PAIRS=1 (the sanitizer build) one case per (target, state), the
# commands in turn.
. "$(dirname "$0")/lib.sh" "$@"
[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
command -v mkfifo >/dev/null || skip "no mkfifo"
pairs=()
[[ ${FILE_STATES_PAIRS:-0} == 1 ]] && pairs=(--pairs)
python3 "$(dirname "$0")/file_states.py" "$KILN_BIN" "$(fixture small)" "$IT_FAKECUDA" "$T" \
  --jobs "${FILE_STATES_JOBS:-2}" --only "${FILE_STATES_ONLY:-*}" "${pairs[@]}" ||
  fail "the file-state matrix has failing cases (above)"
