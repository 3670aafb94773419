"""torch.library.opcheck on every kiln:: op, and torch.compile(fullgraph=True)
through a small model that uses them all (fake driver, CPU tensors, the
aot_eager backend; on CUDA tensors with inductor: conftest.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kiln.torch as kt
from conftest import COMPILE_BACKEND
from kiln.torch import _runtime

ops = torch.ops.kiln


@pytest.fixture(autouse=True)
def cpu_tensors():
    _runtime.enable_cpu_tensors(True)
    yield
    _runtime.enable_cpu_tensors(False)


def g(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def cases():
    so = torch.tensor([1234, 8], dtype=torch.int64)
    ids = torch.randint(0, 30, (2, 3))
    tgt = torch.tensor([1, 5, -100, 7])
    angles = torch.rand(4, 3)
    y = torch.softmax(torch.randn(3, 16), -1)
    ym = torch.softmax(torch.randn(2, 2, 3, 8), -1)
    yc = torch.softmax(torch.randn(2, 4, 4), -1)
    x = torch.randn(4, 16)
    w = torch.rand(16) + 0.5
    mean, rstd = x.mean(-1), x.var(-1, unbiased=False).add(1e-5).rsqrt()
    lse = torch.logsumexp(torch.randn(4, 20), -1)
    return [
        (ops.scaled_softmax, (g(3, 16), 0.5)),
        (ops.scaled_softmax_backward, (torch.randn(3, 16), y, 0.5)),
        (ops.scaled_masked_softmax, (g(2, 2, 3, 8), torch.rand(2, 1, 3, 8) < 0.3, 0.5)),
        (ops.scaled_masked_softmax_backward, (torch.randn(2, 2, 3, 8), ym, 0.5)),
        (ops.scaled_upper_triang_masked_softmax, (g(2, 4, 4), 0.5)),
        (ops.scaled_upper_triang_masked_softmax_backward, (torch.randn(2, 4, 4), yc, 0.5)),
        (ops.layer_norm, (g(4, 16), g(16), g(16), 1e-5)),
        (ops.layer_norm_backward, (torch.randn(4, 16), x, mean, rstd, w)),
        (ops.rms_norm, (g(4, 16), g(16), 1e-5)),
        (ops.rms_norm_backward, (torch.randn(4, 16), x, rstd, w)),
        (ops.embedding, (ids, g(30, 8), 0, 30, False)),
        (ops.embedding_backward, (torch.randn(2, 3, 8), ids, 30, 0, True)),
        (ops.bias_gelu, (g(3, 16), g(16))),
        (ops.bias_gelu_backward, (torch.randn(3, 16), x[:3], w)),
        (ops.bias_swiglu, (g(3, 16), g(16))),
        (ops.bias_swiglu_backward, (torch.randn(3, 8), x[:3], w)),
        (ops.bias_dropout_add, (g(4, 16), g(16), g(4, 16), 0.25, True, so)),
        (ops.bias_dropout_add_backward, (torch.randn(4, 16), 0.25, True, so)),
        (ops.rope, (g(4, 2, 2, 8), angles, "sbhd", False)),
        (ops.rope_backward, (torch.randn(2, 4, 2, 8), angles, "bshd", True)),
        (ops.cross_entropy, (g(4, 20), tgt, -100, False)),
        (ops.cross_entropy_backward, (torch.randn(4, 20), lse, torch.rand(4), tgt, 0, -100)),
        (ops.cross_entropy_stats, (torch.randn(4, 20), tgt, 0, 20, -100, False)),
    ]


def layout_cases():
    """Inputs that are not contiguous: transposed, sliced, expanded. The real
    op copies them and returns a contiguous tensor; the fake impl must give
    the same strides (torch.compile raises "incorrect fake kernel" else)."""
    so = torch.tensor([1234, 8], dtype=torch.int64)
    x = torch.randn(4, 16)
    w = torch.rand(16) + 0.5
    rstd = x.var(-1, unbiased=False).add(1e-5).rsqrt()
    lse = torch.logsumexp(torch.randn(4, 20), -1)
    tgt = torch.tensor([1, 5, -100, 7])
    t = lambda *s: torch.randn(*s).t().requires_grad_()  # noqa: E731
    return [
        ("softmax_t", ops.scaled_softmax, (t(16, 3), 0.5)),
        ("softmax_bwd_t", ops.scaled_softmax_backward, (torch.randn(16, 3).t(), torch.softmax(torch.randn(3, 16), -1), 0.5)),
        ("masked_softmax_perm", ops.scaled_masked_softmax, (torch.randn(2, 3, 2, 8).transpose(1, 2), torch.zeros(1, 1, 3, 8, dtype=torch.bool), 0.5)),
        ("causal_sliced", ops.scaled_upper_triang_masked_softmax, (torch.randn(2, 4, 8)[..., :4], 0.5)),
        ("layer_norm_t", ops.layer_norm, (torch.randn(16, 4).transpose(0, 1).requires_grad_(), w, w - 1, 1e-5)),
        ("layer_norm_expanded", ops.layer_norm, (torch.randn(1, 16).expand(4, 16), w, w - 1, 1e-5)),
        ("rms_norm_bwd_t", ops.rms_norm_backward, (torch.randn(16, 4).t(), x, rstd, w)),
        ("embedding_t", ops.embedding, (torch.randint(0, 30, (3, 2)).t(), torch.randn(8, 30).t(), 0, 30, False)),
        ("bias_gelu_sliced", ops.bias_gelu, (torch.randn(3, 32)[:, ::2].requires_grad_(), torch.randn(32)[::2])),
        ("bias_swiglu_t", ops.bias_swiglu, (t(16, 3), None)),
        ("bias_dropout_add_expanded", ops.bias_dropout_add, (t(16, 4), None, torch.randn(16).expand(4, 16), 0.25, True, so)),
        ("rope_perm", ops.rope, (torch.randn(2, 4, 2, 8).transpose(0, 1), torch.rand(4, 3), "sbhd", False)),
        ("cross_entropy_t", ops.cross_entropy, (t(20, 4), tgt, -100, False)),
        ("cross_entropy_bwd_t", ops.cross_entropy_backward, (torch.randn(20, 4).t(), lse, torch.rand(4), tgt, 0, -100)),
    ]


@pytest.mark.parametrize("op,args", cases(), ids=lambda v: str(v) if not isinstance(v, tuple) else "")
def test_opcheck(op, args):
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("name,op,args", layout_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_opcheck_non_contiguous_inputs(name, op, args):
    torch.library.opcheck(op, args, test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_compile_transposed_inputs():
    # "incorrect fake kernel" before: the fake impl kept x's strides
    x = torch.randn(16, 3)
    w, b = torch.ones(3), torch.zeros(3)
    f = torch.compile(lambda t: kt.scaled_softmax(t.t()), fullgraph=True, backend=COMPILE_BACKEND)
    torch.testing.assert_close(f(x), F.softmax(x.t(), -1))
    g = torch.compile(lambda t: kt.layer_norm(t.transpose(0, 1), w, b), fullgraph=True, backend=COMPILE_BACKEND)
    torch.testing.assert_close(g(x.t().contiguous()), F.layer_norm(x, (3,), w, b), rtol=1e-5, atol=1e-5)


def test_opcheck_seed_draw():
    # Random by design: two calls draw two pairs, so only the schema, fake
    # and registration checks apply (not the eager-vs-traced comparison).
    torch.library.opcheck(
        ops.philox_seed_offset,
        (torch.randn(2),),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


class AllOps(torch.nn.Module):
    """A toy block that calls every op once."""

    def __init__(self, vocab=40, hidden=16):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(vocab, hidden))
        self.ln_w, self.ln_b = torch.nn.Parameter(torch.ones(hidden)), torch.nn.Parameter(torch.zeros(hidden))
        self.rms_w = torch.nn.Parameter(torch.ones(hidden))
        self.up = torch.nn.Linear(hidden, 2 * hidden, bias=False)
        self.up_b = torch.nn.Parameter(torch.zeros(2 * hidden))
        self.gelu_b = torch.nn.Parameter(torch.zeros(hidden))
        self.out_b = torch.nn.Parameter(torch.zeros(hidden))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.angles = torch.rand(4, 4)

    def forward(self, ids, target, mask, training: bool):
        b, s = ids.shape
        h = kt.embedding(ids, self.emb)  # [b, s, hidden]
        x = kt.layer_norm(h, self.ln_w, self.ln_b)
        q = kt.rope(x.view(b, s, 2, 8), self.angles, layout="bshd")  # [b, s, heads, d]
        q = q.permute(0, 2, 1, 3)  # [b, heads, s, d]
        scores = q @ q.transpose(-1, -2)
        p1 = kt.scaled_masked_softmax(scores, mask, 0.35)
        p2 = kt.scaled_upper_triang_masked_softmax(scores.reshape(b * 2, s, s), 0.35).view(b, 2, s, s)
        p3 = kt.scaled_softmax(scores, 0.35)
        att = ((p1 + p2 + p3) @ q).permute(0, 2, 1, 3).reshape(b, s, 16)
        x = kt.rms_norm(att, self.rms_w)
        x = kt.bias_swiglu(self.up(x), self.up_b)
        x = kt.bias_gelu(x, self.gelu_b)
        x = kt.bias_dropout_add(x, self.out_b, h, 0.1, training)
        logits = self.head(x).reshape(b * s, -1)
        return kt.cross_entropy(logits, target.reshape(-1))


@pytest.mark.parametrize("training", [False, True])
def test_torch_compile_fullgraph_matches_eager(training):
    torch.manual_seed(0)
    model = AllOps()
    ids = torch.randint(0, 40, (2, 4))
    target = torch.randint(0, 40, (2, 4))
    mask = torch.rand(2, 1, 4, 4) < 0.2
    mask[..., 0] = False

    def run(fn):
        torch.manual_seed(99)
        loss = fn(ids, target, mask, training)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        return loss, grads

    loss_e, grads_e = run(model)
    compiled = torch.compile(model, fullgraph=True, backend=COMPILE_BACKEND)
    loss_c, grads_c = run(compiled)
    torch.testing.assert_close(loss_c, loss_e)
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b)
    assert torch.isfinite(loss_e)

