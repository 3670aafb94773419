#!/usr/bin/env python3
"""check_resources.py CACHE RECORDS_TSV LIST_JSON — the resource check of
resources.sh and all_targets.sh: every CUBIN record has no spills, no stack
frame and 0 < registers <= 255; every PTX record has -1 for each resource;
the stored ptxas log of each CUBIN names exactly the entry points `kiln list`
gives its unit, each with no stack and no spills, and agrees with the record.
RECORDS_TSV: unit, target, kind, registers, spill_stores, spill_loads,
shared_bytes, stack_bytes, log_digest (tab-separated). Exit 1 on any finding.
"""
import json, os, re, sys
cache, tsv, listing = sys.argv[1:4]
entries = {u["name"]: {e["name"] for e in u["entries"]} for u in json.load(open(listing))["units"]}
bad = []
for line in open(tsv):
    unit, target, kind, *res, log_digest = line.rstrip("\n").split("\t")
    regs, st, ld, smem, stack = map(int, res)
    what = f"{unit} {target}"
    if kind == "ptx":
        if [regs, st, ld, smem, stack] != [-1] * 5:
            bad.append(f"{what}: PTX record has resources {res}, expected -1 for each")
        continue
    if kind != "cubin":
        bad.append(f"{what}: kind {kind}")
        continue
    if st != 0 or ld != 0:
        bad.append(f"{what}: spills {st} bytes stored / {ld} loaded")
    if stack != 0:
        bad.append(f"{what}: stack frame of {stack} bytes")
    if not 0 < regs <= 255:
        bad.append(f"{what}: registers = {regs}")
    if smem < 0:
        bad.append(f"{what}: shared_bytes = {smem}")
    # ptxas -v lines in the stored log, entry point by entry point.
    if not log_digest:
        bad.append(f"{what}: no build log stored")
        continue
    log = open(os.path.join(cache, "cas", log_digest[:2], log_digest[2:])).read()
    compiled = re.findall(r"Compiling entry function '([^']+)' for '([^']+)'", log)
    names = {n for n, _ in compiled}
    if names != entries[unit]:
        bad.append(f"{what}: ptxas compiled {len(names)} entry points, kiln list names {len(entries[unit])}; "
                   f"missing {sorted(entries[unit] - names)[:3]}, extra {sorted(names - entries[unit])[:3]}")
    if any(t != target for _, t in compiled):
        bad.append(f"{what}: log compiles for {sorted({t for _, t in compiled})}")
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if len(frames) < len(names):
        bad.append(f"{what}: {len(frames)} 'stack frame' lines for {len(names)} entry points")
    nonzero = [f for f in frames if f != ("0", "0", "0")]
    if nonzero:
        bad.append(f"{what}: the log shows stack/spills {nonzero[:3]}")
    used = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    if not used or max(used) != regs:
        bad.append(f"{what}: record says {regs} registers, the log's maximum is {max(used) if used else None}")
for m in bad:
    print("  " + m, file=sys.stderr)
sys.exit(1 if bad else 0)
