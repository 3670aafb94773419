#!/usr/bin/env bash
# The artifacts are real: every CUBIN blob is a 64-bit ELF for EM_CUDA whose
# e_flags name the record's SM (the encoding is checked against nvcc's own
# cubin for the same arch when nvcc is there) and whose symbol table defines
# every entry point `kiln list` names; every PTX blob is PTX text for its arch
# that declares every entry point and that ptxas assembles for that arch.
. "$(dirname "$0")/lib.sh" "$@"

cuda_bin=${IT_CUDA_BIN:-/usr/local/cuda/bin}
ptxas=$(PATH=$cuda_bin:$PATH command -v ptxas || true)
nvcc=$(PATH=$cuda_bin:$PATH command -v nvcc || true)
[[ -n $ptxas ]] || die "ptxas not found (in $cuda_bin or PATH)"

cache=$T/cache
copy_cache "$(fixture full)" "$cache"
expect_exit 0 kiln list --json
cp "$OUT" "$T/list.json"
index_query "$cache" "SELECT unit, target, kind, digest FROM records ORDER BY unit, target" >"$T/records.tsv"
expect_eq "$(wc -l <"$T/records.tsv")" 9 "records in the full fixture"

# The e_flags encoding of the SM, from nvcc's cubin of a trivial kernel.
refs=()
if [[ -n $nvcc ]]; then
  printf 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1.f; }\n' >"$T/k.cu"
  for arch in $(cut -f2 "$T/records.tsv" | sed -n 's/^sm_//p' | sort -u); do
    if timeout 120 "$nvcc" -cubin -arch="sm_$arch" "$T/k.cu" -o "$T/ref_$arch.cubin" 2>"$T/nvcc.err"; then
      refs+=("$arch=$T/ref_$arch.cubin")
    else
      fail "nvcc -cubin -arch=sm_$arch failed: $(head -3 "$T/nvcc.err")"
    fi
  done
else
  log "nvcc not found: the e_flags encoding is not cross-checked against nvcc"
fi

python3 - "$cache" "$T/records.tsv" "$T/list.json" "${refs[@]}" <<'PY' || fail "artifact check failed (see above)"
import json, os, struct, sys
cache, tsv, listing, *refs = sys.argv[1:]
entries = {u["name"]: {e["name"] for e in u["entries"]} for u in json.load(open(listing))["units"]}
bad = []

def elf(data):
    """(osabi, e_machine, e_flags, names of defined function symbols) of an ELF64 file."""
    if data[:4] != b"\x7fELF":
        raise ValueError("no ELF magic")
    if data[4] != 2 or data[5] != 1:
        raise ValueError(f"not ELF64 little-endian (class {data[4]}, data {data[5]})")
    e_machine, = struct.unpack_from("<H", data, 18)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_flags, = struct.unpack_from("<I", data, 48)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    funcs = set()
    for name, typ, flags, addr, off, size, link, info, align, entsize in sections:
        if typ != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for o in range(off, off + size, entsize):
            st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", data, o)
            if st_info & 0xF == 2 and st_shndx != 0:  # STT_FUNC, defined
                end = data.index(b"\0", stroff + st_name)
                funcs.add(data[stroff + st_name:end].decode())
    return data[7], e_machine, e_flags, funcs

def sm_of(e_flags):
    return (e_flags >> 8) & 0xFF  # EF_CUDA_SM: bits 8..15 (sm_90 -> 0x5a)

for ref in refs:
    arch, path = ref.split("=", 1)
    osabi, machine, flags, _ = elf(open(path, "rb").read())
    if machine != 190 or sm_of(flags) != int(arch):
        bad.append(f"nvcc's sm_{arch} cubin: e_machine {machine}, e_flags {flags:#x}: "
                   f"the SM encoding this test assumes is wrong")
ref_osabi = {int(r.split("=")[0]): elf(open(r.split("=", 1)[1], "rb").read())[0] for r in refs}

n_cubin = n_ptx = 0
for line in open(tsv):
    unit, target, kind, digest = line.split()
    what = f"{unit} {target}"
    data = open(os.path.join(cache, "cas", digest[:2], digest[2:]), "rb").read()
    arch = int(target.split("_")[1].rstrip("a"))
    if kind == "cubin":
        n_cubin += 1
        try:
            osabi, machine, flags, funcs = elf(data)
        except (ValueError, struct.error, IndexError) as e:
            bad.append(f"{what}: not a CUBIN: {e}")
            continue
        if machine != 190:
            bad.append(f"{what}: e_machine {machine}, not EM_CUDA (190)")
        if sm_of(flags) != arch:
            bad.append(f"{what}: e_flags {flags:#x} name sm_{sm_of(flags)}, not sm_{arch}")
        if arch in ref_osabi and osabi != ref_osabi[arch]:
            bad.append(f"{what}: EI_OSABI {osabi:#x}, nvcc's is {ref_osabi[arch]:#x}")
        missing = entries[unit] - funcs
        if missing:
            bad.append(f"{what}: {len(missing)} entry points not defined in the ELF, e.g. {sorted(missing)[:3]}")
        print(f"  {what}: ELF EM_CUDA e_flags={flags:#x} (sm_{sm_of(flags)}), {len(funcs)} functions")
    elif kind == "ptx":
        n_ptx += 1
        if b"\0" in data:
            bad.append(f"{what}: PTX holds a NUL byte")
        lines = [l.strip() for l in data.decode("utf-8", "replace").splitlines()]
        directives = [l for l in lines if l and not l.startswith("//")]
        if len(directives) < 3 or not directives[0].startswith(".version "):
            bad.append(f"{what}: PTX does not start with .version: {directives[:1]}")
        elif directives[1].split()[:2] != [".target", f"sm_{arch}"]:
            bad.append(f"{what}: PTX's second directive is '{directives[1]}', expected '.target sm_{arch}'")
        declared = {l.split("(")[0].split()[-1] for l in lines if l.startswith(".visible .entry ")}
        missing = entries[unit] - declared
        if missing:
            bad.append(f"{what}: {len(missing)} entry points not in the PTX, e.g. {sorted(missing)[:3]}")
        print(f"  {what}: PTX {directives[0]}, {directives[1]}, {len(declared)} entries")
    else:
        bad.append(f"{what}: kind {kind}")
if (n_cubin, n_ptx) != (6, 3):
    bad.append(f"{n_cubin} CUBIN and {n_ptx} PTX records, expected 6 and 3")
for m in bad:
    print("  " + m, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# ptxas must accept every PTX blob for its arch.
while IFS=$'\t' read -r unit target kind digest; do
  [[ $kind == ptx ]] || continue
  arch=${target#compute_}
  cp "$(blob_path "$cache" "$digest")" "$T/$unit.ptx"
  if timeout 300 "$ptxas" -arch="sm_$arch" "$T/$unit.ptx" -o /dev/null 2>"$T/ptxas.err"; then
    log "ptxas -arch=sm_$arch accepts $unit $target"
  else
    fail "ptxas -arch=sm_$arch rejects $unit $target: $(head -5 "$T/ptxas.err")"
  fi
done <"$T/records.tsv"
