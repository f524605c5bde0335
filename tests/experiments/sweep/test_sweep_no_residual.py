"""The ``no_residual`` norm placement the residual suite needs: pre-norm wiring minus the residual add."""

import torch
from torch import nn

from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.placements import NoResidual
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.registry import resolve
from andrea_lab.model.transformer import Andrea


class Recorder(nn.Module):
    def forward(self, x):
        self.seen = x.detach().clone()
        return torch.full_like(x, 3.0)


def test_the_sublayer_reads_the_normalised_stream_and_its_output_replaces_it():
    recorder = Recorder()
    block = NoResidual(16, recorder, TorchBackend())
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    torch.testing.assert_close(recorder.seen, nn.functional.layer_norm(x, (16,)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, torch.full_like(x, 3.0))  # no "x +": the stream is not carried over
    assert NoResidual.final_norm, "the final LayerNorm is kept, as in pre-norm"


def test_it_is_registered_and_builds_a_model_that_trains():
    assert resolve("norm_placement", "no_residual") is NoResidual
    torch.manual_seed(0)
    model = Andrea(
        AndreaConfig(vocab_size=257, block_size=16, d_model=32, n_layer=2, n_head=2, norm_placement="no_residual")
    )
    assert not isinstance(model.final_norm, nn.Identity)
    idx = torch.randint(0, 257, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    first_block_grad = model.blocks[0].attn.sublayer.qkv.weight.grad
    assert first_block_grad is not None and torch.isfinite(first_block_grad).all()
