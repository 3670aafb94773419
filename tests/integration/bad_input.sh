#!/usr/bin/env bash
# Bad input gets a clear message on stderr naming what is at fault, the
# documented exit status (2 bad usage or input, 1 an operation that failed),
# and leaves nothing half-written: no temp files, no new records, and no cache
# created where the input was rejected before one was needed.
# (Read-only and full file systems and foreign owners: bad_input_fs.sh.)
. "$(dirname "$0")/lib.sh" "$@"

warm=$T/warm
copy_cache "$(fixture warm)" "$warm"
cache_state "$warm" >"$T/warm.before"
# unchanged WHAT: the warm copy holds what it held before.
unchanged() {
  cache_state "$warm" >"$T/warm.after"
  diff -u "$T/warm.before" "$T/warm.after" >&2 || fail "$1 changed the cache"
}
# not_created WHAT DIR
not_created() { [[ ! -e $2 ]] || fail "$1 created $2"; }
expect_exit 0 kiln list --json
units=$(json "$OUT" '" ".join(u["name"] for u in d["units"])')

log "unknown arch"
expect_exit 2 kiln build --arch 91 --kernels scaled_softmax --cache "$T/arch"
expect_stderr_contains "91"
grep -Eq '(^|[^0-9])80,[0-9,]*90([^0-9]|$)' "$ERR" || fail "the message does not list the supported archs: $(cat "$ERR")"
not_created "--arch 91" "$T/arch"
expect_exit 2 kiln build --arch 91 --kernels scaled_softmax --cache "$warm"
unchanged "--arch 91"
for a in sm_9x 90+cubin compute_90a ''; do
  expect_exit 2 kiln build --arch "$a" --kernels scaled_softmax --cache "$T/arch"
  [[ -n $a ]] && expect_stderr_contains "$a" "the message names '--arch $a'"
  not_created "--arch '$a'" "$T/arch"
done

log "a glob matching no unit"
expect_exit 2 kiln build --arch 90 --kernels 'nomatch*' --cache "$warm"
expect_stderr_contains "nomatch*"
for u in $units; do expect_stderr_contains "$u" "the message lists the units"; done
unchanged "--kernels 'nomatch*'"
expect_exit 2 kiln build --arch 90 --kernels 'nomatch*' --cache "$T/glob"
if [[ -e $T/glob ]]; then # allowed to exist, but empty of records and temp files
  expect_eq "$(index_query "$T/glob" "SELECT count(*) FROM records")" 0 "records after a glob matching nothing"
  expect_eq "$(tmp_files "$T/glob")" 0 "temp files after a glob matching nothing"
fi

log "a cache path under a regular file (ENOTDIR)"
echo "not a directory" >"$T/file"
expect_exit 1 kiln build --arch 90 --kernels scaled_softmax --cache "$T/file/cache"
expect_stderr_contains "$T/file" "the message names the path at fault"
expect_stderr_contains "not a directory"
expect_exit 1 kiln build --arch 90 --kernels scaled_softmax --cache "$T/file"
expect_stderr_contains "$T/file"
expect_stderr_contains "not a directory"
expect_eq "$(cat "$T/file")" "not a directory" "the regular file's content"
KILN_CACHE_DIR=$T/file/cache expect_exit 1 kiln cache stats
expect_stderr_contains "$T/file"

log "a world-writable or group-writable cache directory"
mkdir -m 0777 "$T/open" && chmod 0777 "$T/open"
expect_exit 1 kiln build --arch 90 --kernels scaled_softmax --cache "$T/open"
expect_stderr_contains "$T/open"
expect_stderr_contains "chmod 700"
expect_eq "$(find "$T/open" -mindepth 1 | wc -l)" 0 "files created in the world-writable directory"
expect_eq "$(stat -c %a "$T/open")" 777 "mode of the directory (kiln must not change it)"
mkdir -m 0770 "$T/group" && chmod 0770 "$T/group"
expect_exit 1 kiln build --arch 90 --kernels scaled_softmax --cache "$T/group"
expect_stderr_contains "$T/group"
expect_stderr_contains "chmod 700"
expect_eq "$(find "$T/group" -mindepth 1 | wc -l)" 0 "files created in the group-writable directory"
chmod 0777 "$warm"
expect_exit 1 kiln cache ls --cache "$warm"
expect_stderr_contains "chmod 700"
chmod 0700 "$warm"
unchanged "a world-writable warm cache"

log "-j 0 and other bad numbers"
for j in 0 -1 abc 4097; do
  expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$T/jobs" -j "$j"
  expect_stderr_contains "'$j'" "the message names -j $j"
  not_created "-j $j" "$T/jobs"
done
KILN_JOBS=abc expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$warm"
expect_stderr_contains "KILN_JOBS"
KILN_FAILURE_TTL=-4 expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$warm"
expect_stderr_contains "KILN_FAILURE_TTL"
unchanged "bad KILN_JOBS / KILN_FAILURE_TTL"

log "kiln cache gc without --max-size, with a bad size"
expect_exit 2 kiln cache gc --cache "$warm"
expect_stderr_contains "--max-size"
expect_exit 2 kiln cache gc --max-size 12Q --cache "$warm"
expect_stderr_contains "12Q"
expect_exit 2 kiln cache gc --max-size=-5 --cache "$warm"
expect_stderr_contains "-5"
unchanged "kiln cache gc with bad usage"
expect_exit 2 kiln cache rm --cache "$warm"
expect_stderr_contains "--all"
unchanged "kiln cache rm without a pattern"
# Usage is checked before the cache is opened: a missing or default cache
# directory must not turn a usage error into a file-system one.
expect_exit 2 kiln cache gc --cache "$T/nocache"
expect_stderr_contains "--max-size" "gc without --max-size on a cache that does not exist yet"
expect_exit 2 kiln cache gc --max-size 12Q --cache "$T/nocache"
expect_stderr_contains "12Q" "gc --max-size 12Q on a cache that does not exist yet"
expect_exit 2 kiln cache rm --cache "$T/nocache"
expect_stderr_contains "--all" "rm without a pattern on a cache that does not exist yet"
not_created "cache usage errors" "$T/nocache"

log "unknown commands, subcommands, options and arguments"
expect_exit 2 kiln bogus
expect_stderr_contains "bogus"
expect_stderr_contains "usage: kiln"
expect_exit 2 kiln
expect_stderr_contains "usage: kiln"
expect_exit 2 kiln cache bogus --cache "$warm"
expect_stderr_contains "bogus"
expect_stderr_contains "ls, stats, verify, gc, rm"
expect_exit 2 kiln cache
expect_stderr_contains "usage: kiln cache"
expect_exit 2 kiln cache ls extra --cache "$warm"
expect_stderr_contains "extra"
expect_exit 2 kiln build --arch 90 --bogus-flag --cache "$warm"
expect_stderr_contains "bogus-flag"
expect_exit 2 kiln build --arch 90 stray-argument --cache "$warm"
expect_stderr_contains "stray-argument"
expect_exit 2 kiln list --bogus-flag
expect_stderr_contains "bogus-flag"
unchanged "unknown commands and options"

log "--cache '' is an error on every command, never the default cache"
for cmd in "build --arch 90 --kernels scaled_softmax" "cache ls" "cache verify" "check --arch 90" "doctor" \
  "probe" "warmup --arch 90" "warmup"; do
  # shellcheck disable=SC2086 # the command's words
  HOME=$T/home XDG_CACHE_HOME= KILN_CACHE_DIR= expect_exit 2 kiln $cmd --cache ''
  expect_stderr_contains "--cache '': an empty path" "kiln $cmd --cache ''"
done
[ ! -e "$T/home/.cache/kiln" ] || fail "--cache '' created the default cache under HOME"

log "a limit is in the message that enforces it"
expect_exit 2 kiln build -j 100000 --arch 90 --cache "$T/lim"
expect_stderr_contains "in [1, 4096]"
expect_exit 2 kiln warmup --arch 90 --timeout 1e308 --cache "$T/lim"
expect_stderr_contains "at most 604800 (7 days)"
not_created "limits" "$T/lim"
