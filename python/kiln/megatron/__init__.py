"""kiln for Megatron-LM: megatron-core runs kiln's kernels with one line, and
starts without compiling on every rank.

    import kiln.megatron
    kiln.megatron.apply()            # before the model is built
    initialize_megatron(...)         # Megatron-LM's own
    kiln.megatron.initialize()       # every rank: the coordinated one-rank build

``apply`` patches megatron-core's call sites of the selected ops (the table in
``kiln.megatron.patches``), including the names other modules bound at
import; nothing in Megatron is edited. ``patched()`` reports what was
replaced, ``restore()`` puts megatron-core's own back. docs/megatron.md has
each switch, the versions tested and the numbers.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from kiln.megatron import patches as _p

_lock = threading.Lock()
# site name -> (owner, attribute, original, replacement)
_patched: dict[str, tuple[object, str, object, object]] = {}
# sys.modules name -> what was there before (None: nothing)
_modules: dict[str, object] = {}


def _check_version(allow_untested_version: bool) -> str:
    from kiln.errors import KilnUnsupported

    v = _p.megatron_version()
    if v not in _p.TESTED_VERSIONS and not allow_untested_version:
        raise KilnUnsupported(
            f"kiln.megatron.apply: megatron-core {v} is not a version whose call sites kiln has "
            f"verified ({', '.join(_p.TESTED_VERSIONS)}); nothing was patched. "
            "apply(allow_untested_version=True) patches it anyway when every call site is found",
            status="KILN_EUNSUPPORTED",
            code=-12,
        )
    return v


def apply(
    softmax: bool = True,
    norms: bool = True,
    activations: bool = True,
    dropout_add: bool = True,
    rope: bool = True,
    cross_entropy: bool = True,
    embedding: bool = True,
    *,
    strict_ids: bool = False,
    widen_softmax: bool = True,
    force_softmax_modules: bool = False,
    allow_untested_version: bool = False,
) -> dict[str, str]:
    """Makes the installed megatron-core call kiln's kernels for the selected
    ops; call it before the model is built. Returns ``patched()``.

    - ``softmax``: kiln's Apex-compatible ``scaled_masked_softmax_cuda``,
      ``scaled_upper_triang_masked_softmax_cuda``, ``scaled_softmax_cuda``
      and ``generic_scaled_masked_softmax_cuda`` go in ``sys.modules``, each
      only where Apex's is absent (``force_softmax_modules=True``: always).
      ``widen_softmax`` (default) makes ``FusedScaleMaskSoftmax.is_kernel_available``
      accept every shape kiln's kernels take instead of Apex's
      (16 < sk <= 4096, sq % 4 == 0, ...); it is left alone while Apex's
      modules are the ones in use.
    - ``norms``: megatron's local spec norm (``LocalSpecProvider.layer_norm``,
      ``LNImpl``, the block's final ``LayerNormImpl``) becomes
      ``kiln.megatron.norms.Norm``.
    - ``activations``: ``bias_gelu_impl`` and ``bias_swiglu_impl`` (where
      defined and where ``mlp.py`` and ``shared_experts.py`` bound them).
    - ``dropout_add``: ``bias_dropout_add_fused_train`` / ``_inference``,
      which ``get_bias_dropout_add(training, fused=True)`` returns.
    - ``rope``: ``rope_utils.fused_apply_rotary_pos_emb`` and ``_thd``
      (``config.apply_rope_fusion=True``; without TE they are None).
    - ``cross_entropy``: ``fused_vocab_parallel_cross_entropy``
      (``--cross-entropy-loss-fusion``).
    - ``embedding``: ``VocabParallelEmbedding.forward``. ``strict_ids=True``:
      an id outside the vocabulary raises ``KilnInvalidArgument`` at once
      (position and id; TP = 1 and TP > 1 alike) instead of megatron's
      silent zero row at TP > 1.

    Every selected call site is looked up before any is changed: a
    megatron-core that lacks one (or a version not in
    ``patches.TESTED_VERSIONS``, unless ``allow_untested_version``) raises
    ``KilnUnsupported`` naming the version and the sites, with nothing
    patched. Idempotent: replacements are marked, and a second call with the
    same arguments changes nothing."""
    from kiln.megatron import apex_softmax

    _check_version(allow_untested_version)
    chosen = {
        "softmax": softmax,
        "norms": norms,
        "activations": activations,
        "dropout_add": dropout_add,
        "rope": rope,
        "cross_entropy": cross_entropy,
        "embedding": embedding,
    }
    modules: list[str] = []
    if softmax:
        modules = [n for n in apex_softmax.MODULES if force_softmax_modules or not apex_softmax.apex_has(n)]
    kiln_masked = "scaled_masked_softmax_cuda" in modules or (
        getattr(sys.modules.get("scaled_masked_softmax_cuda"), _p.MARK, False)
    )
    sites = [
        s
        for s in _p.SITES
        if chosen[s.switch] and (s.switch != "softmax" or (widen_softmax and kiln_masked))
    ]
    with _lock:
        found = _p.resolve(sites)  # every site, or KilnUnsupported with nothing changed
        plan = [(s, owner, name, cur, s.make(cur)) for s, owner, name, cur in found if not _p.is_kiln(cur)]
        for s, owner, name, cur, new in plan:
            setattr(owner, name, new)
            _patched[s.name] = (owner, name, cur, new)
        for n in modules:
            have = sys.modules.get(n)
            if have is apex_softmax.MODULES[n]:
                continue
            _modules[n] = have
            sys.modules[n] = apex_softmax.MODULES[n]
        if embedding:
            _p.SETTINGS["strict_ids"] = bool(strict_ids)
    return patched()


def patched() -> dict[str, str]:
    """What ``apply`` (and ``initialize``) replaced: {megatron-core name:
    kiln's replacement}, e.g. {"megatron.core.transformer.mlp.bias_gelu_impl":
    "kiln.megatron.patches.bias_gelu_impl", "sys.modules['scaled_softmax_cuda']":
    "kiln.megatron.apex_softmax.scaled_softmax_cuda"}."""
    out: dict[str, str] = {}
    for name, (_, _, _, new) in _patched.items():
        mod = getattr(new, "__module__", "kiln.megatron")
        out[name] = f"{mod}.{getattr(new, '__qualname__', getattr(new, '__name__', repr(new)))}"
    for n in _modules:
        out[f"sys.modules['{n}']"] = f"kiln.megatron.apex_softmax.{n}"
    return out


def restore() -> None:
    """Puts back everything ``apply``/``initialize`` replaced (megatron-core's
    own functions, classes and sys.modules entries)."""
    with _lock:
        for owner, name, original, _ in _patched.values():
            setattr(owner, name, original)
        _patched.clear()
        for n, before in _modules.items():
            if before is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = before
        _modules.clear()
        _p.SETTINGS["strict_ids"] = False


def _skip_jit_warmup() -> bool:
    """Megatron-LM's set_jit_fusion_options() ends with _warmup_jit_function(),
    which runs the torch.compile'd bias-gelu/swiglu/dropout-add on every rank:
    replaced by a no-op (kiln's kernels replace those fusions). False when
    Megatron-LM's training package is not installed (megatron-core alone
    has no such warmup)."""
    import importlib.util

    try:
        if importlib.util.find_spec("megatron.training") is None:
            return False
        import megatron.training.initialize as mti  # noqa: PLC0415
    except Exception:  # megatron.training needs Megatron-LM's whole tree
        return False
    cur = vars(mti).get("_warmup_jit_function")
    if cur is None or _p.is_kiln(cur):
        return cur is not None

    def _warmup_jit_function() -> None:
        """Skipped by kiln.megatron.initialize(): kiln's kernels replace the
        torch.compile'd fusions it would compile on every rank."""

    with _lock:
        _patched["megatron.training.initialize._warmup_jit_function"] = (
            mti, "_warmup_jit_function", cur, _p.mark(_warmup_jit_function),
        )
        mti._warmup_jit_function = _warmup_jit_function
    return True


def initialize(
    group: object | None = None,
    arch: str | list[str] | None = None,
    kernels: str | None = None,
    heartbeat_ms: float | None = None,
    timeout_s: float | None = None,
    cache: object | None = None,
    skip_jit_warmup: bool = True,
    peer_timeout_s: float | None = None,
) -> Any:
    """Every rank calls it after Megatron's ``initialize_megatron()``: kiln's
    coordinated warmup (``kiln.torch.warmup``) over Megatron's ranks, so a
    cold job builds each kernel once, on one rank, which sends a heartbeat
    while it compiles and then the bytes to every other rank; a warm job
    loads from the cache. No collective waits on the build, so no process
    group timeout fires however long it takes.

    ``group``: None is kiln's own gloo group over the default group's ranks
    (every rank of the job); the other arguments are ``kiln.torch.warmup``'s
    (``kernels`` a glob over unit names, None: every unit).
    ``skip_jit_warmup`` (default): Megatron-LM's ``_warmup_jit_function``
    (the per-rank torch.compile of bias-gelu/swiglu/dropout-add in
    ``set_jit_fusion_options``) becomes a no-op, when Megatron-LM's training
    package is installed. Returns kiln.torch.warmup's report; raises its
    errors (KilnTimeout, KilnPeerError, KilnCompileError)."""
    from kiln.torch import warmup

    report = warmup(
        group=group,
        arch=arch,
        kernels=kernels,
        heartbeat_ms=heartbeat_ms,
        timeout_s=timeout_s,
        cache=cache,
        peer_timeout_s=peer_timeout_s,
    )
    if skip_jit_warmup:
        _skip_jit_warmup()
    return report


def __getattr__(name: str) -> object:
    # kiln.megatron.gpt_layer_spec (Megatron-LM: --spec kiln.megatron gpt_layer_spec)
    # is built on first use and kept in the module's dict, where --spec reads it.
    if name in ("gpt_layer_spec", "get_gpt_layer_spec"):
        from kiln.megatron import norms

        value = getattr(norms, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["apply", "patched", "restore", "initialize", "gpt_layer_spec", "get_gpt_layer_spec"]
