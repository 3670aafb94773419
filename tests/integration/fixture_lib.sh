# Helpers of the fixture setup tests (fixture.sh, all_targets.sh; sourced
# after lib.sh). A fixture cache is made once per ctest run and then only
# copied (copy_cache) or read as a layer (KILN_CACHE_PATH): the tests that are
# not about building never compile. Each fixture grows from the one before it (warm -> full ->
# kernels), so no (unit, target) is compiled twice in a run.
#
# IT_FIXTURE_SEED (-DKILN_TEST_FIXTURE_SEED) names fixture folders, ':'
# separated, to take a fixture from instead of compiling it: another build's
# (scripts/test points the sanitizer build at the normal build's) or the
# fixture store a rerun reuses (IT_FIXTURE_STORE, below). A fixture found
# there is copied, checked by `kiln cache verify` (every blob re-hashed), and
# made this build's by `kiln build --arch ARCH --kernels GLOB` into the copy:
# every key is derived here, from the units' current sources, the options
# and the NVRTC found, so the build hits what is still current and compiles
# only what changed; records it did not name (stale keys) are removed. The
# keys do not depend on how kiln itself was compiled, so the artifacts are
# the ones this build would make (tests/README.md, "Fixture caches").
#
# IT_FIXTURE_STORE (-DKILN_TEST_FIXTURE_STORE; scripts/test: ~/.cache/
# kiln-test-fixtures) is where a fixture that had to be compiled (in part or
# whole) is published for the next run, as ccache keeps object files: NAME is
# a symbolic link to the folder .NAME.XXXXXX, replaced by a rename, so that a
# run reading the store while another publishes sees the old fixture or the
# new one.

# Each maker leaves the new cache in $T/NAME, for the caller to check (with
# index_query: a private copy) and then install_fixture.
#
# fixture_from_seed NAME ARCH GLOB PAIRS: the first seed's NAME that verifies,
# brought up to date as above, in $T/NAME (fixture.sh checks its PAIRS records); sets
# SEED_CHANGED to how many records that compiled or removed (0: the seed was
# this build's already). Returns 1 (nothing made) when no seed has NAME or
# none verifies.
fixture_from_seed() {
  local name=$1 arch=$2 glob=$3 pairs=$4 seed src seeds key stale
  IFS=: read -r -a seeds <<<"${IT_FIXTURE_SEED:-}"
  for seed in "${seeds[@]}"; do
    [[ -n $seed && -f $seed/$name/index.sqlite ]] || continue
    src=$(realpath -e "$seed/$name") || continue
    [[ $src != $(realpath -m "$FIXTURES/$name") ]] || continue
    rm -rf "${T:?}/$name"
    if ! cp -a "$src" "$T/$name" 2>"$T/seed.log" || ! kiln cache verify --cache "$T/$name" >>"$T/seed.log" 2>&1 ||
      ! IT_TIMEOUT=900 kiln build --arch "$arch" --kernels "$glob" --cache "$T/$name" --json >"$T/seed.json" 2>>"$T/seed.log" ||
      [[ $(json "$T/seed.json" '[d["targets"], d["failed"]]') != "[$pairs, 0]" ]]; then
      log "$seed/$name does not serve as $name (damaged?): $(tail -2 "$T/seed.log" | tr '\n' ' ')"
      rm -rf "${T:?}/$name"
      continue
    fi
    json "$T/seed.json" '"\n".join(sorted(i["key"] for i in d["items"]))' >"$T/keys"
    stale=$(index_query "$T/$name" "SELECT key FROM records ORDER BY key" | comm -23 - "$T/keys")
    for key in $stale; do
      kiln cache rm "$key" --cache "$T/$name" >/dev/null 2>>"$T/seed.log" || die "kiln cache rm $key: $(tail -1 "$T/seed.log")"
    done
    SEED_CHANGED=$(($(json "$T/seed.json" 'd["built"]') + $(wc -w <<<"$stale")))
    log "$name: copied from $seed/$name, verified; $(json "$T/seed.json" 'd["built"]') (unit, target)" \
      "compiled, $(wc -w <<<"$stale") stale records removed, the rest current"
    return 0
  done
  return 1
}

# store_fixture NAME: publishes $FIXTURES/NAME in IT_FIXTURE_STORE (when set)
# for the next run. Best effort: a failure is logged, the test goes on.
store_fixture() {
  local name=$1 store=${IT_FIXTURE_STORE:-} dir link old
  [[ -n $store ]] || return 0
  mkdir -p "$store" && dir=$(mktemp -d "$store/.$name.XXXXXX") && chmod --reference="$FIXTURES/$name" "$dir" &&
    cp -a "$FIXTURES/$name/." "$dir/" && link=$(mktemp -u "$store/.$name.link.XXXXXX") &&
    old=$(readlink "$store/$name" 2>/dev/null || true) &&
    ln -s "${dir##*/}" "$link" && mv -T "$link" "$store/$name" || {
    log "could not publish $name in $store (the next run compiles it again)"
    [[ -z ${dir:-} ]] || rm -rf "$dir"
    return 0
  }
  # Earlier versions: a run may still be copying the one just replaced.
  find "$store" -maxdepth 1 -name ".$name.*" ! -name "${dir##*/}" ! -name "${old:-none}" -mmin +60 \
    -exec rm -rf {} + 2>/dev/null || true
  log "$name: published in $store for the next run"
}

# make_fixture NAME FROM ARCH GLOB PAIRS [layer]: $FIXTURES/NAME, taken from
# a seed that serves (fixture_from_seed) or else grown from FROM
# (grow_fixture), checked to hold PAIRS records, installed (install_fixture
# NAME [layer]), and published in IT_FIXTURE_STORE (store_fixture) when it
# compiled or dropped anything. fixture.sh and all_targets.sh's parts.
make_fixture() {
  local name=$1 from=$2 arch=$3 glob=$4 pairs=$5 how=${6:-} compiled=1
  if fixture_from_seed "$name" "$arch" "$glob" "$pairs"; then
    compiled=$SEED_CHANGED
  else
    grow_fixture "$name" "$from" "$arch" "$glob" "$pairs"
  fi
  expect_eq "$(index_query "$T/$name" "SELECT count(*) FROM records")" "$pairs" "the $name fixture's records"
  ((FAILURES == 0)) || die "the $name fixture is not what it should be"
  install_fixture "$name" $how
  ((compiled == 0)) || store_fixture "$name"
}

# plan_pairs ARCH GLOB: how many (unit, target) pairs `kiln build --arch ARCH
# --kernels GLOB` makes (what `kiln check` finds missing in an empty cache);
# dies when that is none.
plan_pairs() {
  local d n
  d=$(mktemp -d "$T/plan.XXXXXX")
  new_cache "$d/c"
  kiln check --arch "$1" --kernels "$2" --cache "$d/c" --json >"$d/pairs.json" || true
  n=$(json "$d/pairs.json" 'len(d["missing"])')
  ((n > 0)) || die "--arch $1 --kernels '$2' names nothing"
  echo "$n"
}

# install_fixture NAME [layer]: $T/NAME becomes $FIXTURES/NAME (replacing an
# older one). "layer": the index's (empty) write-ahead log and shared-memory
# files are removed, as scripts/image-prebuild does, so that readers open it
# immutable and never write beside it.
install_fixture() {
  local d=$T/$1
  if [[ ${2:-} == layer ]]; then
    [[ ! -s $d/index.sqlite-wal ]] || die "$1: kiln left a non-empty write-ahead log"
    rm -f "$d/index.sqlite-wal" "$d/index.sqlite-shm"
  fi
  mkdir -p "$FIXTURES"
  rm -rf "${FIXTURES:?}/$1"
  cp -a "$d" "$FIXTURES/$1"
  log "fixture cache at $FIXTURES/$1"
}

# grow_fixture NAME FROM ARCH GLOB TARGETS: a copy of fixture FROM (or an empty
# cache when FROM is -), then `kiln build --arch ARCH --kernels GLOB` into it;
# the build must end with TARGETS targets and no failure. The copy's records
# are hits, so only what FROM lacks is compiled.
grow_fixture() {
  local name=$1 from=$2 arch=$3 glob=$4 want=$5 staging=$T/$1
  if [[ $from == - ]]; then new_cache "$staging"; else copy_cache "$(fixture "$from")" "$staging"; fi
  IT_TIMEOUT=900 expect_exit 0 kiln build --arch "$arch" --kernels "$glob" --cache "$staging" --json
  cp "$OUT" "$T/build.json"
  expect_eq "$(json "$T/build.json" '[d["targets"], d["built"] + d["hits"], d["failed"]]')" \
    "[$want, $want, 0]" "fixture $name: targets, built + hits, failed"
  ((FAILURES == 0)) || die "could not build the $name fixture"
  log "$name: $(json "$T/build.json" 'd["built"]') built, $(json "$T/build.json" 'd["hits"]') from $from," \
    "$(json "$T/build.json" 'round(d["wall_ms"] / 1000, 1)') s"
}
