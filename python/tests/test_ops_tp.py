"""Vocabulary-parallel embedding and cross-entropy at TP = 2: two processes
(gloo; ranks.run), each with half the vocabulary, against torch on the whole
of it."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import ranks
import torch
import torch.distributed as dist
import torch.nn.functional as F

TP = 2
VOCAB, HIDDEN, ROWS = 40, 8, 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out_dir: str) -> None:
    import kiln
    import kiln.torch as kt
    from kiln.torch import _runtime

    _runtime.enable_cpu_tensors()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=TP, timeout=timedelta(seconds=60)
    )
    torch.manual_seed(0)  # the same full tensors on every rank
    logits = 3 * torch.randn(ROWS, VOCAB)
    target = torch.randint(0, VOCAB, (ROWS,))
    target[1] = -100
    weight = torch.randn(VOCAB, HIDDEN)
    ids = torch.randint(0, VOCAB, (ROWS,))
    part = VOCAB // TP
    cols = slice(rank * part, (rank + 1) * part)

    mine = logits[:, cols].clone().requires_grad_()
    loss = kt.cross_entropy(mine, target, group=dist.group.WORLD, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), mine)
    full = logits.clone().requires_grad_()
    want = F.cross_entropy(full, target, reduction="none")
    (want_grad,) = torch.autograd.grad(want.sum(), full)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want_grad[:, cols], rtol=1e-5, atol=1e-5)

    y = kt.embedding(ids, weight[cols].clone(), vocab_start=rank * part, vocab_size=VOCAB, sync_check=True)
    dist.all_reduce(y)
    torch.testing.assert_close(y, F.embedding(ids, weight))

    bad = ids.clone()
    bad[3] = VOCAB + 1
    try:
        kt.embedding(bad, weight[cols].clone(), vocab_start=rank * part, vocab_size=VOCAB, sync_check=True)
        raise AssertionError("a bad id passed at TP = 2")
    except kiln.KilnInvalidArgument as e:
        assert f"token id {VOCAB + 1} at position 3 is outside the vocabulary [0, {VOCAB})" in str(e), e
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(out_dir, f"ok.{rank}"), "w").close()


def test_vocab_parallel_cross_entropy_and_embedding_match_torch(tmp_path):
    ranks.run(_rank, TP, (_free_port(), str(tmp_path)), deadline_s=240)
    assert sorted(os.listdir(tmp_path)) == [f"ok.{r}" for r in range(TP)]
