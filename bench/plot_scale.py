#!/usr/bin/env python3
"""Plots of the coordination protocol at scale and of the herd, from the committed raw outputs.

Reads, in --results (default bench/results), with --prefix (default 2026-11-28-cpu-2core):

    PREFIX-coord_scale.txt        tests/sim/coord_scale's table (the simulation, 1k..16k ranks)
    PREFIX-coord_scale-model.txt  tests/sim/coord_model.py's tables, one per alpha/beta
    PREFIX-remote_herd.txt        integration.remote_herd's lines for each HERD_JOBS x HERD_RANKS

and writes three PNGs next to them (or into --out):

    PREFIX-coord_scale-ready.png  the protocol's own time to ready (ready less the root's fetch)
                                  against N: the simulation's points per algorithm (ring, tree, rd)
                                  with the model's curve to 100,000 ranks at the same alpha and
                                  beta; and the model per transport at every alpha/beta of the
                                  model file, to 100,000 ranks
    PREFIX-coord_scale-wait.png   the longest single wait against N, the same way, with the
                                  heartbeat and the 2-heartbeat target
    PREFIX-remote_herd.png        origin requests and the last job's time to ready against J jobs,
                                  straight to the origin and through the pull-through cache

It runs nothing expensive: the simulation's and the herd's numbers are parsed, never re-measured;
the model's curves come from tests/sim/coord_model.py (arithmetic, milliseconds). It is not part
of CI (docs/coordination.md, "At scale"; docs/performance.md).

It needs matplotlib, which the test environment (scripts/python-env) does not have. Make a small
venv of its own once:

    python3 -m venv ~/.cache/kiln-bench-plot/venv
    ~/.cache/kiln-bench-plot/venv/bin/pip install matplotlib
    ~/.cache/kiln-bench-plot/venv/bin/python bench/plot_scale.py

Exit status: 0 when every plot was written; 1 on a missing or unreadable input; 2 without
matplotlib (or on bad arguments).
"""
import argparse
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INSTALL = ("matplotlib is missing; make a venv for the plots (not the test venv) once:\n"
           "    python3 -m venv ~/.cache/kiln-bench-plot/venv\n"
           "    ~/.cache/kiln-bench-plot/venv/bin/pip install matplotlib\n"
           "then run: ~/.cache/kiln-bench-plot/venv/bin/python bench/plot_scale.py")

ALGS = ("ring", "tree", "rd")
ALG_LABEL = {"ring": "ring (NCCL)", "tree": "binomial tree (gloo, kiln.torch.dist)", "rd": "tree + rec. doubling (MPI)"}
ALG_COLOR = {"ring": "tab:red", "tree": "tab:green", "rd": "tab:blue"}
ALG_MARKER = {"ring": ("o", 9), "tree": ("s", 6.5), "rd": ("^", 4.5)}  # sizes differ: points may coincide
# the model's collective algorithms for each simulated one (tests/sim/coord_model.py's TRANSPORTS)
ALG_MODEL = {"ring": ("ring", "ring"), "tree": ("tree", "tree"), "rd": ("tree", "rd")}
# the right-hand panel: coord_model.py's transports, with their labels and colours
TRANSPORT_LINES = (("nccl", "NCCL", "tab:red"), ("gloo-ring", "gloo, torch's all_reduce (before)", "tab:orange"),
                   ("gloo", "gloo, kiln's tree", "tab:green"), ("mpi", "MPI", "tab:blue"))
CURVE_N = sorted({1 << k for k in range(1, 17)} | {100000})


class InputError(Exception):
    pass


def load_model():
    path = os.path.join(ROOT, "tests", "sim", "coord_model.py")
    spec = importlib.util.spec_from_file_location("coord_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def parse_sim(path):
    """coord_scale's table: {'alpha_us', 'beta_ns', 'build_ms', 'hb_ms', 'art_B', 'rows': [...]}."""
    text = read(path)
    m = re.search(r"alpha ([\d.]+) us per hop, beta ([\d.]+) ns per byte, root's fetch ([\d.]+) ms, "
                  r"heartbeat ([\d.]+) ms", text)
    if not m:
        raise InputError(f"{path}: no '# virtual time: alpha ... heartbeat ...' line (not coord_scale's output?)")
    out = {"alpha_us": float(m[1]), "beta_ns": float(m[2]), "build_ms": float(m[3]), "hb_ms": float(m[4]),
           "rows": []}
    for line in text.splitlines():
        sec = [x.split() for x in line.split("|")]
        if len(sec) < 5 or len(sec[0]) != 2 or sec[0][0] not in ALGS or not sec[0][1].isdigit():
            continue
        try:
            out["rows"].append({"alg": sec[0][0], "n": int(sec[0][1]), "over_ms": float(sec[1][1]),
                                "wait_ms": float(sec[1][3]), "root_B_hb": int(sec[1][-2]),
                                "art_B": int(sec[1][-1])})
        except (ValueError, IndexError):
            raise InputError(f"{path}: cannot read the row {line.strip()!r}") from None
    if not out["rows"]:
        raise InputError(f"{path}: no rows of the form 'ring 1024 | ...'")
    out["art_B"] = out["rows"][0]["art_B"]
    return out


def parse_model_sets(path):
    """coord_model.py's headers: [(alpha_us, beta_ns, build_ms, hb_ms, artifacts, artifact_B)]."""
    sets = re.findall(r"# model: alpha ([\d.]+) us, beta ([\d.]+) ns/B, fetch ([\d.]+) ms, heartbeat ([\d.]+) "
                      r"ms, (\d+) artifact\(s\) of (\d+) B", read(path))
    if not sets:
        raise InputError(f"{path}: no '# model: alpha ...' header (not coord_model.py's output?)")
    return [(float(a), float(b), float(f), float(h), int(k), int(p)) for a, b, f, h, k, p in sets]


def parse_herd(path):
    """[{'jobs', 'ranks', 'straight', 'cached', 'straight_s', 'cached_s', 'artifacts'}] in file order."""
    text = read(path)
    runs = []
    for block in re.split(r"^=== ", text, flags=re.M)[1:]:
        m = re.match(r"HERD_JOBS=(\d+) HERD_RANKS=(\d+)", block)
        req = re.findall(r"origin requests: (\d+) = .*?(\d+) artifacts.*?the last job ready after ([\d.]+) s",
                         block)
        if not m or len(req) != 2:
            raise InputError(f"{path}: the run '=== {block.splitlines()[0]}' lacks its two 'origin requests' "
                             "lines (straight, through the cache)")
        runs.append({"jobs": int(m[1]), "ranks": int(m[2]), "straight": int(req[0][0]),
                     "cached": int(req[1][0]), "artifacts": int(req[1][1]),
                     "straight_s": float(req[0][2]), "cached_s": float(req[1][2])})
    if not runs:
        raise InputError(f"{path}: no '=== HERD_JOBS=J HERD_RANKS=N' runs")
    return runs


def curve(cm, alg, key, a_us, b_ns, build_ms, hb_ms, payloads, algs=None):
    bc, ar = algs or ALG_MODEL[alg]
    return [cm.model(bc, ar, n, a_us, b_ns, build_ms, hb_ms, payloads)[key] for n in CURVE_N]


def fmt_ab(a_us, b_ns):
    return f"α {a_us:g} µs, β {b_ns:g} ns/B"


def plot_vs_n(plt, cm, sim, sets, key, ylabel, title, out, refs=()):
    """refs: horizontal lines (y, label, line style, the label's x on the left and on the right)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    a, b, build, hb = sim["alpha_us"], sim["beta_ns"], sim["build_ms"], sim["hb_ms"]
    for alg in ALGS:
        pts = sorted((r["n"], r[key]) for r in sim["rows"] if r["alg"] == alg)
        if pts:
            marker, size = ALG_MARKER[alg]
            left.plot(*zip(*pts), marker, ms=size, color=ALG_COLOR[alg], label=f"{ALG_LABEL[alg]}: simulated")
        left.plot(CURVE_N, curve(cm, alg, key, a, b, build, hb, [sim["art_B"]]), "-", lw=1,
                  color=ALG_COLOR[alg], label=f"{alg}: model")
    left.set_title(f"simulation and model, {fmt_ab(a, b)}", fontsize=9)
    styles = ["-", "--", "-.", ":"]
    for i, (sa, sb, sbuild, shb, k, p) in enumerate(sets):
        ls = styles[i % len(styles)]
        for transport, name, color in TRANSPORT_LINES:
            right.plot(CURVE_N, curve(cm, None, key, sa, sb, sbuild, shb, [p] * k, cm.TRANSPORTS[transport]),
                       ls, lw=1.2, color=color, label=f"{name}, {fmt_ab(sa, sb)}")
    right.set_title("model per transport, to 100,000 ranks", fontsize=9)
    for side, ax in enumerate((left, right)):
        for y, label, style, xs in refs:
            ax.axhline(y, color="grey", ls=style, lw=0.8)
            ax.text(xs[side], y * 1.08, label, fontsize=7, color="dimgrey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ranks N")
        ax.grid(True, which="major", lw=0.3)
    left.legend(fontsize=6, loc="upper left")
    right.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # 16 lines: beside the plot
    left.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80, metadata={"Software": None})
    plt.close(fig)


def plot_herd(plt, runs, out):
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    jobs = sorted({r["jobs"] for r in runs})
    keys = 2 * runs[0]["artifacts"]  # a record and a blob per missing artifact
    at = {}  # (J, origin requests) -> the N of the runs there, to label each point once
    for r in runs:
        left.plot(r["jobs"], r["straight"], "o", color="tab:red")
        left.plot(r["jobs"], r["cached"], "s", color="tab:blue")
        at.setdefault((r["jobs"], r["straight"]), []).append(str(r["ranks"]))
        for y, marker, color in ((r["straight_s"], "o", "tab:red"), (r["cached_s"], "s", "tab:blue")):
            right.plot(r["jobs"], y, marker, color=color)
            right.annotate(f"N={r['ranks']}", (r["jobs"], y), textcoords="offset points", xytext=(5, -3),
                           fontsize=7)
    for (j, y), ns in at.items():
        left.annotate(f"N={', '.join(ns)}", (j, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    left.plot(jobs, [j * keys for j in jobs], "-", color="tab:red", lw=0.8,
              label=f"straight: J × {keys} (one GET per record and blob, roots only)")
    left.plot(jobs, [keys] * len(jobs), "-", color="tab:blue", lw=0.8,
              label=f"pull-through cache (proxy_cache_lock): {keys}")
    left.set_ylabel("requests the origin served")
    left.set_title(f"origin requests, {runs[0]['artifacts']} missing artifacts", fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    right.plot([], [], "o", color="tab:red", label="straight to the origin")
    right.plot([], [], "s", color="tab:blue", label="through the cache")
    right.set_ylabel("last job ready, s")
    right.set_title("the last job's time to ready (2 shared cores, 1 process per rank)", fontsize=9)
    right.legend(fontsize=7, loc="lower right")
    for ax in (left, right):
        ax.set_xlabel("jobs J started at once")
        ax.set_xticks(jobs)
        ax.set_ylim(bottom=0)
        ax.grid(True, lw=0.3)
    fig.suptitle("The herd: J jobs × N ranks against one nginx origin (integration.remote_herd)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80, metadata={"Software": None})
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.path.join(ROOT, "bench", "results"), help="where the raw outputs are")
    p.add_argument("--prefix", default="2026-11-28-cpu-2core", help="the raw outputs' common name prefix")
    p.add_argument("--out", help="where the PNGs go, created if missing (default: --results)")
    args = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"plot_scale: {INSTALL}", file=sys.stderr)
        return 2
    base = os.path.join(args.results, args.prefix)
    out = os.path.join(args.out or args.results, args.prefix)
    try:
        sim = parse_sim(base + "-coord_scale.txt")
        sets = parse_model_sets(base + "-coord_scale-model.txt")
        herd = parse_herd(base + "-remote_herd.txt")
    except InputError as e:
        print(f"plot_scale: {e}", file=sys.stderr)
        return 1
    try:
        os.makedirs(args.out or args.results, exist_ok=True)
    except OSError as e:
        print(f"plot_scale: --out {args.out}: {e.strerror}", file=sys.stderr)
        return 1
    cm = load_model()
    hb = sim["hb_ms"]
    written = [out + "-coord_scale-ready.png", out + "-coord_scale-wait.png", out + "-remote_herd.png"]
    plot_vs_n(plt, cm, sim, sets, "over_ms", "protocol time to ready, ms (ready less the fetch)",
              f"Cold start: the protocol's own time (the root's fetch of {sim['build_ms']:g} ms taken out)",
              written[0], refs=((30000, "MegaScale's whole job init, ~30 s", ":", (1000, 150)),))
    plot_vs_n(plt, cm, sim, sets, "wait_ms", "longest single wait, ms",
              "Cold start: the longest single wait of any rank",
              written[1], refs=((hb, f"heartbeat {hb:g} ms", "-", (2, 2)),
                                (2 * hb, "2 heartbeats (target)", "--", (2, 2))))
    plot_herd(plt, herd, written[2])
    for path in written:
        print(f"{path} ({os.path.getsize(path) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
