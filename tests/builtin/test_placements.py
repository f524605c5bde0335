import torch
from torch import nn

from andrea_lab.builtin.backends import TorchBackend
from andrea_lab.builtin.placements import PostNorm, PreNorm


class Recorder(nn.Module):
    """A sublayer that remembers its input and adds a constant, so the wiring can be observed."""

    def forward(self, x):
        self.seen = x.detach().clone()
        return torch.full_like(x, 3.0)


def per_token_stats(x):
    return x.mean(-1), x.var(-1, unbiased=False)


def test_pre_norm_normalises_the_sublayer_input_and_adds_to_the_raw_stream():
    recorder = Recorder()
    block = PreNorm(16, recorder, TorchBackend())
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    mean, var = per_token_stats(recorder.seen)
    torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-5, rtol=0)
    torch.testing.assert_close(var, torch.ones_like(var), atol=1e-3, rtol=0)
    torch.testing.assert_close(out, x + 3.0)  # the stream itself is not normalised
    assert PreNorm.final_norm


def test_post_norm_feeds_the_raw_stream_and_normalises_after_the_add():
    recorder = Recorder()
    block = PostNorm(16, recorder, TorchBackend())
    x = torch.randn(2, 4, 16) * 5 + 2
    out = block(x)
    torch.testing.assert_close(recorder.seen, x)  # the sublayer reads the raw stream
    expected = nn.functional.layer_norm(x + 3.0, (16,))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert not PostNorm.final_norm
