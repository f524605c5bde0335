"""FLOPs per token (PaLM's convention, see the package docstring), with N read off the model's parameter
breakdown (:func:`andrea_lab.inside.params.parameter_breakdown`), never re-derived by formula."""

from __future__ import annotations

from typing import Any

from andrea_lab.inside.params import parameter_breakdown
from andrea_lab.model.config import AndreaConfig


def parameter_counts(config: AndreaConfig) -> dict[str, int]:
    """Parameters of ANDREA by role (the tied embedding stored once), from a meta-device model."""
    b = parameter_breakdown(config)
    counts = {
        "token_embedding": b.token_embedding,  # = the output head (tied)
        "position_embedding": b.position_embedding,
        "blocks": b.trunk,
        "final_norm": b.final_norm,
    }
    counts["total"] = b.total
    counts["matmul"] = counts["total"] - counts["position_embedding"]  # N in 6·N
    counts["non_embedding"] = counts["blocks"] + counts["final_norm"]  # Kaplan et al.'s N (for reference)
    return counts


def flops_per_token(config: AndreaConfig, seq_len: int | None = None) -> dict[str, Any]:
    """Training FLOPs per token, PaLM's convention: ``6·N + 12·L·H·Q·T`` (see the package docstring)."""
    T = config.block_size if seq_len is None else seq_len
    counts = parameter_counts(config)
    dense = 6 * counts["matmul"]
    attention = 12 * config.n_layer * config.n_head * config.head_size * T
    return {
        "formula": "6*N + 12*n_layer*n_head*head_size*T  (PaLM appendix B; N = all parameters except the "
        "position table, tied embedding once; attention counted over all T keys, not T/2)",
        "N": counts["matmul"],
        "parameters": counts,
        "seq_len": T,
        "dense": dense,
        "attention": attention,
        "total": dense + attention,
    }
