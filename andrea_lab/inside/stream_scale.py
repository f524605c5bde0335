"""How large the residual stream starts, and how much of it is the embedding, in a model at initialisation.

Why: placements that norm each sublayer's *output* (peri, reordered) add a unit-scale update per sublayer,
while the embeddings start at ``init_std``; after the first sublayer the embedding (the direct token path a
small model learns its bigrams through) is a small part of the stream. This measures that, for any config,
so the placements' mechanism check (``experiments/suites/placements_mechanism.yaml``, docs/results.md) rests
on numbers, not on arithmetic done by hand. ``scripts/stream_at_init.py`` prints it for a suite's variants.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.transformer import Andrea


@dataclass(frozen=True)
class StreamScale:
    """Root-mean-square sizes of the stream at initialisation, averaged over seeds."""

    embedding_rms: float
    """The stream the first block reads (token + position embeddings, times ``embedding_scale``)."""
    first_update_rms: float
    """What the first sublayer's wiring changes (output − input): the update the embedding is set against."""
    final_rms: float
    """The stream after the last sublayer, where the final norm (if any) reads it."""

    @property
    def embedding_power_share(self) -> float:
        """The embedding's mean square over the final stream's: about the embedding's share of the final
        stream's power when the sublayers' updates are uncorrelated with it (as they are at initialisation)."""
        return (self.embedding_rms / self.final_rms) ** 2


def _rms(t: torch.Tensor) -> float:
    return t.float().pow(2).mean().sqrt().item()


@torch.no_grad()
def stream_scale_at_init(config: AndreaConfig, seeds: tuple[int, ...] = (0, 1, 2), batch: int = 8) -> StreamScale:
    """The model of ``config`` at its initialisation under each seed, run on ``batch`` sequences of uniformly
    drawn token ids of the full context (at initialisation no token is special), averaged over the seeds."""
    if not seeds:
        raise ValueError("stream_scale_at_init needs at least one seed")
    sums = [0.0, 0.0, 0.0]
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        model = Andrea(config).eval()
        ids = torch.randint(0, config.vocab_size, (batch, config.block_size), generator=generator)
        streams: list[tuple[torch.Tensor, torch.Tensor]] = []

        def record(sublayer, before, after, streams=streams):
            streams.append((before, after))

        with model.tap(on_stream=record):
            model(ids)
        first_in, first_out = streams[0]
        for i, value in enumerate((_rms(first_in), _rms(first_out - first_in), _rms(streams[-1][1]))):
            sums[i] += value
    return StreamScale(*(total / len(seeds) for total in sums))
