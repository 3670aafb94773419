#!/usr/bin/env python3
"""tests/emu/mutate.py — shows that unit.test_kernels_softmax_emu can fail.

Run by hand (ctest does not: it takes minutes and rebuilds the kernels once
per mutation):

    tests/emu/mutate.py [--work DIR] [--cmake-arg ARG ...] [N ...]

It copies kernels/ into a scratch directory, configures a scratch build whose
emulator test compiles that copy (-DKILN_EMU_KERNEL_DIR=...; the repository is
never touched), checks the unmutated copy passes, then for each planted bug
below (or only the numbers given) rebuilds the test and expects it to fail.
A mutation counts as caught when the test exits non-zero, or when the build
stops because the emulator refuses PTX it does not know. KNOWN_SURVIVORS are
bugs the emulator cannot see (see docs/kernels.md); they run last and are
reported, not counted. Exit status: 0 when every mutation was caught, 1 when
one was missed, 2 when the unmutated kernels do not pass.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

# (file under kernels/, text, replacement, the bug it stands for)
MUTATIONS = [
    ("softmax/softmax_core.cuh",
     "    if (i < cols) r.lim = (int)i + 1;",
     "    if (i < cols) r.lim = (int)i;",
     "causal: query i misses key i (off by one)"),
    ("softmax/softmax_core.cuh",
     "r.mask = mask + ((mask_batches == 1 ? 0 : batch) * sq + i) * cols;",
     "r.mask = mask + ((mask_batches == 1 ? 0 : h) * sq + i) * cols;",
     "masked: mask row picked by head instead of batch"),
    ("softmax/softmax_core.cuh",
     "r.mask = mask + ((mask_batches == 1 ? 0 : batch) * sq + i) * cols;",
     "r.mask = mask + ((mask_batches == 0 ? 0 : batch) * sq + i) * cols;",
     "masked: mask not broadcast over the batch when mask_batches is 1"),
    ("softmax/softmax_core.cuh",
     "kWidth == 32 ? red : red + 32); /* red is null for a warp */",
     "red); /* red is null for a warp */",
     "b forward: sum reuses the max buffer with no barrier between (a race)"),
    ("softmax/softmax_core.cuh",
     "row += gridDim.x, parity ^= 32) {",
     "row += gridDim.x, parity ^= 0) {",
     "b backward: consecutive rows share one buffer (a race across rows)"),
    ("softmax/softmax_core.cuh",
     "       row += (kiln_i64)gridDim.x * warps) {",
     "       row += (kiln_i64)gridDim.x) {",
     "w forward: grid stride forgets the warps per block (rows done twice)"),
    ("softmax/softmax_core.cuh",
     "s = (s == 0.f ? 0.f : s * kiln_exp2f(m - mn)) + add;",
     "s = s + add;",
     "g forward: running sum not rescaled when the max grows"),
    ("softmax/softmax_core.cuh",
     "v[u] != kiln_neg_inf() ? kiln_exp2f(v[u] - rm) * inv : 0.f);",
     "kiln_exp2f(v[u] - rm) * inv);",
     "g forward: masked columns not forced to 0 (fully masked rows give NaN)"),
    ("softmax/softmax_core.cuh",
     "const bool part = v[k] != kiln_neg_inf();",
     "const bool part = v[k] > kiln_neg_inf();",
     "w/b forward: NaN elements drop out instead of poisoning the row"),
    ("softmax/softmax_core.cuh",
     "    if (col < r.lim) {",
     "    if (col < cols) {",
     "w/b backward: causal sum reads the upper triangle"),
    ("common/kiln_types.cuh",
     "  if (lane == 0) buf[threadIdx.x >> 5] = v;\n  __syncthreads();",
     "  if (lane == 0) {\n    buf[threadIdx.x >> 5] = v;\n    __syncthreads();\n  }",
     "block max: barrier inside divergent code (deadlock on the device)"),
    ("common/kiln_types.cuh",
     "lane < kThreads / 32 ? buf[lane] : kiln_neg_inf()",
     "buf[lane]",
     "block max reads shared slots no warp wrote (zero here: a spurious max of 0)"),
    ("common/kiln_types.cuh",
     "return __uint_as_float((unsigned)h.bits << 16);",
     "return __uint_as_float((unsigned)h.bits << 15);",
     "bf16 widening shifts by 15"),
    ("common/kiln_types.cuh",
     'asm("cvt.rn.f16.f32 %0, %1;"',
     'asm("cvt.rz.f16.f32 %0, %1;"',
     "f16 narrowing rounds toward zero (PTX the emulator does not know)"),
]

# Bugs the emulator cannot see, kept so the limit stays documented and checked:
# shared memory is zero at the start and never re-poisoned (docs/kernels.md),
# so reading slots no warp wrote gives 0, which a sum absorbs (on the device
# it reads whatever was there).
KNOWN_SURVIVORS = [
    ("common/kiln_types.cuh",
     "lane < kThreads / 32 ? buf[lane] : 0.f",
     "buf[lane]",
     "block sum reads shared slots no warp wrote"),
]

TEST = "test_kernels_softmax_emu"


def run(cmd, log, timeout=None):
    with open(log, "w") as f:
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def tail(log, n=3):
    with open(log, errors="replace") as f:
        lines = [l.rstrip() for l in f if l.startswith(("FAIL", "    ", "COVERAGE"))]
    return lines[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", help="scratch directory (default: a new temp dir)")
    ap.add_argument("--cmake-arg", action="append", default=[], help="extra configure argument")
    ap.add_argument("numbers", nargs="*", type=int,
                    help="mutations to run (1-based; known survivors follow MUTATIONS)")
    a = ap.parse_args()
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    work = a.work or tempfile.mkdtemp(prefix="kiln-mutate-")
    kernels, build = os.path.join(work, "kernels"), os.path.join(work, "build")
    shutil.rmtree(kernels, ignore_errors=True)
    # copyfile, not copy2: fresh mtimes, so a reused scratch build recompiles
    shutil.copytree(os.path.join(root, "kernels"), kernels, copy_function=shutil.copyfile)
    print(f"scratch: {work}", flush=True)

    log = os.path.join(work, "configure.log")
    if run(["cmake", "-S", root, "-B", build, "-DKILN_WERROR=ON",
            f"-DKILN_EMU_KERNEL_DIR={kernels}"] + a.cmake_arg, log) != 0:
        print(f"configure failed: {log}")
        return 2
    exe = os.path.join(build, "tests", "emu", TEST)
    jobs = str(os.cpu_count() or 2)

    def build_and_test(tag):
        """-> (caught, status, log)"""
        blog, tlog = os.path.join(work, tag + ".build.log"), os.path.join(work, tag + ".test.log")
        if run(["cmake", "--build", build, "--target", TEST, "-j", jobs], blog) != 0:
            # Only the emulator refusing unknown PTX is a catch; any other
            # build error means the mutation itself needs fixing.
            ptx = "does not emulate" in open(blog, errors="replace").read()
            return ptx, "refused at build (unknown PTX)" if ptx else "build failed", blog
        rc = run([exe], tlog, timeout=900)
        status = "passed" if rc == 0 else "timed out" if rc == 124 else f"failed (exit {rc})"
        return rc != 0, status, tlog

    caught, status, log = build_and_test("baseline")
    print(f"baseline: {status}", flush=True)
    if status != "passed":
        print(f"  the unmutated kernels must pass first: {log}")
        return 2

    plan = [(m, False) for m in MUTATIONS] + [(m, True) for m in KNOWN_SURVIVORS]
    chosen = a.numbers or range(1, len(plan) + 1)
    if any(n < 1 or n > len(plan) for n in chosen):
        print(f"mutations are numbered 1..{len(plan)}")
        return 2
    missed = 0
    for n in chosen:
        (rel, old, new, what), known = plan[n - 1]
        # Every file pristine again, rewritten (not copied with its old mtime,
        # which would leave the last mutation's objects looking up to date).
        for other in {m[0][0] for m in plan}:
            shutil.copyfile(os.path.join(root, "kernels", other), os.path.join(kernels, other))
        path = os.path.join(kernels, rel)
        text = open(path).read()
        if old not in text:
            print(f"{n:2}. {what}: pattern not found in kernels/{rel} (update mutate.py)")
            missed += 1
            continue
        open(path, "w").write(text.replace(old, new, 1))
        caught, status, log = build_and_test(f"m{n}")
        if known:
            verdict = "caught (a known survivor no longer survives: update mutate.py and " \
                      "docs/kernels.md)" if caught else "survived, as documented"
        else:
            verdict = "caught" if caught else "MISSED"
            missed += not caught
        print(f"{n:2}. {verdict}: {what} -> test {status}", flush=True)
        if caught and status.startswith("failed"):
            for line in tail(log):
                print(f"      {line[:150]}")
    for other in {m[0][0] for m in plan}:
        shutil.copyfile(os.path.join(root, "kernels", other), os.path.join(kernels, other))
    print(f"{missed} planted bug(s) missed; logs in {work}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
