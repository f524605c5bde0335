"""The parameter breakdown counts every tensor once: a tied head with the token embedding, an untied one apart."""

from __future__ import annotations

from andrea_lab import Andrea, preset
from andrea_lab.inside.params import format_breakdown, parameter_breakdown


def test_the_breakdown_adds_up_tied_and_untied():
    tied = parameter_breakdown(preset("andrea-micro"))
    untied = parameter_breakdown(preset("andrea-micro", tie_embeddings=False))
    config = tied.config
    assert tied.output_head == 0 and untied.output_head == config.vocab_size * config.d_model
    for b in (tied, untied):
        parts = b.token_embedding + b.position_embedding + b.trunk + b.final_norm + b.output_head
        assert parts == b.total == Andrea(b.config).num_parameters()
    assert "token embedding (tied, once)" in format_breakdown(tied, "micro")
    assert "output head (untied)" not in format_breakdown(tied, "micro")
    printed = format_breakdown(untied, "micro")
    assert "token embedding (input only)" in printed and f"{untied.output_head:,}" in printed
