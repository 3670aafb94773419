# Helpers of the fixture setup tests (fixture.sh, all_targets.sh; sourced
# after lib.sh). A fixture cache is made once per ctest run and then only
# copied (copy_cache) or read as a layer (KILN_CACHE_PATH): the tests that are
# not about building never compile. Each fixture grows from the one before it (warm -> full ->
# kernels), so no (unit, target) is compiled twice in a run.
#
# IT_FIXTURE_SEED (-DKILN_TEST_FIXTURE_SEED, set by scripts/test for the
# sanitizer build) names another build's fixture folder: a fixture found there
# is copied and checked (`kiln cache verify` and `kiln check`, by this build's
# kiln) instead of compiled again. The keys do not depend on how kiln itself
# was compiled, so the artifacts are the ones this build would make.

# Each maker leaves the new cache in $T/NAME, for the caller to check (with
# index_query: a private copy) and then install_fixture.
#
# fixture_from_seed NAME ARCH GLOB: copies the seed's NAME into $T/NAME when it
# is there and passes the checks; returns 1 (nothing made) when not.
fixture_from_seed() {
  local name=$1 arch=$2 glob=$3 seed=${IT_FIXTURE_SEED:-}
  [[ -n $seed && -f $seed/$name/index.sqlite ]] || return 1
  [[ $(realpath -m "$seed/$name") != $(realpath -m "$FIXTURES/$name") ]] || return 1
  cp -a "$seed/$name" "$T/$name"
  if ! kiln cache verify --cache "$T/$name" >"$T/seed.log" 2>&1 ||
    ! kiln check --arch "$arch" --kernels "$glob" --cache "$T/$name" >>"$T/seed.log" 2>&1; then
    log "the seed's $name does not verify; building it instead: $(tail -3 "$T/seed.log")"
    rm -rf "${T:?}/$name"
    return 1
  fi
  log "$name: copied from the seed $seed/$name, verified"
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
