#!/usr/bin/env python3
"""bench/megatron_layer.py — one megatron-core TransformerLayer training step
(forward + backward) with kiln.megatron.apply() against the same layer without
it, in the same process, on the same weights and inputs.

The layer is megatron-core's local spec (get_gpt_layer_local_spec: no Apex and
no Transformer Engine, so the baseline is megatron-core's own fallbacks:
torch softmax, its torch.compile'd bias-gelu and bias-dropout-add, unfused
RoPE), causal self-attention, biases, dropout 0.1. Timed with CUDA events:
the median of --reps steps after --warmup steps, for: baseline, kiln, then
the baseline again (its two medians bound the run's noise). The ratio is
baseline / kiln of this run (above 1: kiln is faster). When the shape does not
fit in the GPU's memory, seq is halved until it does (the table says which
shape ran).

  bench/megatron_layer.py [--hidden 4096] [--heads 32] [--seq 4096] [--batch 1]
                          [--dtype bf16|fp16|fp32] [--reps 10] [--warmup 3] [--json FILE]

Needs megatron-core (0.16.1, the version kiln.megatron is verified against),
kiln on PYTHONPATH with its libkiln (KILN_LIBRARY) and a CUDA device for torch;
without one it prints "megatron_layer: skipped: ..." and exits 0. --json
writes the figures (docs/gpu.md: the GPU bundle's results.json takes them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import warnings

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _skip(why: str) -> None:
    print(f"megatron_layer: skipped: {why}", flush=True)
    sys.exit(0)


def _layer(torch, cfg_kw: dict, rope_fusion: bool):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(**cfg_kw, apply_rope_fusion=rope_fusion)
    torch.manual_seed(1234)
    return build_module(get_gpt_layer_local_spec(), config=cfg, layer_number=1).cuda()


def _freqs(torch, s: int, dim: int):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cuda") / dim))
    f = torch.outer(torch.arange(s, dtype=torch.float32, device="cuda"), inv)
    return torch.cat((f, f), dim=-1)[:, None, None, :]  # megatron's RotaryEmbedding layout


def _time(torch, layer, x, dy, freqs, reps: int, warmup: int) -> float:
    """Median milliseconds of one forward + backward over reps, after warmup."""
    times = []
    for i in range(warmup + reps):
        inp = x.detach().requires_grad_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        out, _ = layer(inp, attention_mask=None, rotary_pos_emb=freqs)
        out.backward(dy)
        e1.record()
        e1.synchronize()
        if i >= warmup:
            times.append(e0.elapsed_time(e1))
        layer.zero_grad(set_to_none=True)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    for name in ("hidden", "heads", "seq", "batch", "reps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0 or a.hidden % a.heads:
        ap.error("--warmup must be >= 0 and --hidden a multiple of --heads")

    try:
        import torch
    except ImportError as e:
        _skip(f"torch is not importable ({e})")
    if not torch.cuda.is_available():
        _skip(f"torch {torch.__version__} sees no CUDA device")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core
            from megatron.core import parallel_state as ps
            from megatron.core.tensor_parallel import random as mr
    except ImportError as e:
        _skip(f"megatron-core is not importable ({e})")
    import torch.distributed as dist

    import kiln.megatron as km

    warnings.simplefilter("ignore")
    dtype = getattr(torch, DTYPES[a.dtype])
    if not dist.is_initialized():
        store = os.path.join(tempfile.mkdtemp(prefix="kiln-megatron-layer-"), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    ps.initialize_model_parallel(1, 1)
    mr.model_parallel_cuda_manual_seed(123)
    cfg_kw = dict(
        num_layers=1, hidden_size=a.hidden, num_attention_heads=a.heads, ffn_hidden_size=4 * a.hidden,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16, params_dtype=dtype,
        attention_dropout=0.1, hidden_dropout=0.1, add_bias_linear=True,
        masked_softmax_fusion=True, bias_activation_fusion=True, bias_dropout_fusion=True,
    )
    gpu = torch.cuda.get_device_name()
    print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}, {gpu}, {a.dtype}, "
          f"hidden {a.hidden}, heads {a.heads}, batch {a.batch}, median of {a.reps} after {a.warmup} warm-ups",
          flush=True)
    seq = a.seq
    while True:
        try:
            km.restore()
            base = _layer(torch, cfg_kw, rope_fusion=False)
            g = torch.Generator(device="cuda").manual_seed(7)
            x = torch.randn(seq, a.batch, a.hidden, device="cuda", dtype=dtype, generator=g)
            dy = torch.randn(seq, a.batch, a.hidden, device="cuda", dtype=dtype, generator=g)
            freqs = _freqs(torch, seq, a.hidden // a.heads)
            t_base = _time(torch, base, x, dy, freqs, a.reps, a.warmup)
            km.apply()
            fused = _layer(torch, cfg_kw, rope_fusion=True)
            fused.load_state_dict(base.state_dict())
            t_kiln = _time(torch, fused, x, dy, freqs, a.reps, a.warmup)
            km.restore()
            t_base2 = _time(torch, base, x, dy, freqs, a.reps, a.warmup)
            break
        except torch.cuda.OutOfMemoryError:
            km.restore()
            base = fused = x = dy = freqs = None
            torch.cuda.empty_cache()
            if seq == 1:
                raise
            print(f"seq {seq}: out of memory, halving it", flush=True)
            seq //= 2
    res = {
        "gpu": gpu, "torch": torch.__version__, "megatron_core": megatron.core.__version__, "dtype": a.dtype,
        "hidden": a.hidden, "heads": a.heads, "seq": seq, "batch": a.batch, "reps": a.reps, "warmup": a.warmup,
        "baseline_ms": t_base, "kiln_ms": t_kiln, "baseline_again_ms": t_base2,
        "speedup": min(t_base, t_base2) / t_kiln,
    }
    print(f"{'layer step (fwd + bwd)':<26} {'ms':>9}")
    print(f"{'baseline (no kiln)':<26} {t_base:9.3f}")
    print(f"{'kiln.megatron.apply()':<26} {t_kiln:9.3f}")
    print(f"{'baseline again':<26} {t_base2:9.3f}")
    print(f"seq {seq}: baseline / kiln = {res['speedup']:.3f} (the faster baseline; above 1: kiln is faster)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
