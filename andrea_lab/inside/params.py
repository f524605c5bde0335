"""Where an ANDREA model's parameters are: per block (attention, MLP, norms), trunk, embeddings.

The breakdown is read off an instantiated model (on the meta device, so even a large one costs no
memory) through its sublayers (:meth:`Andrea.sublayers`), never computed from formulas, so it stays true
for any plugin combination.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from andrea_lab.model.components import mlp_hidden, resolved_mlp_ratio
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.contracts import Norm
from andrea_lab.model.transformer import Andrea

#: The figures of the ANDREA-120M spec table (shared/design/ANDREA.md), checked by `andrea params`.
SPEC_120M = {
    "mlp_weights_per_block": 4_718_592,
    "mlp_weights_all_blocks": 56_623_104,
    "layer_norms": 25,
    "trunk": 85_054_464,
    "total": 92_331_264,
}


def _count(module: nn.Module, seen: set[int]) -> int:
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


@dataclass
class BlockBreakdown:
    attention: int
    mlp: int
    norms: int
    mlp_weights: int  # matrices only (no biases): the figure the spec quotes

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms


@dataclass
class ParameterBreakdown:
    config: AndreaConfig
    blocks: list[BlockBreakdown] = field(default_factory=list)
    token_embedding: int = 0
    position_embedding: int = 0
    final_norm: int = 0
    output_head: int = 0  # 0 when tied to the token embedding (tie_embeddings, the default)
    layer_norms: int = 0
    total: int = 0

    @property
    def trunk(self) -> int:
        return sum(b.total for b in self.blocks)

    @property
    def mlp_weights_all_blocks(self) -> int:
        return sum(b.mlp_weights for b in self.blocks)

    def as_dict(self) -> dict:
        return {
            "per_block": [vars(b) | {"total": b.total} for b in self.blocks],
            "trunk": self.trunk,
            "mlp_weights_all_blocks": self.mlp_weights_all_blocks,
            "token_embedding": self.token_embedding,
            "position_embedding": self.position_embedding,
            "final_norm": self.final_norm,
            "output_head": self.output_head,
            "layer_norms": self.layer_norms,
            "total": self.total,
        }


def parameter_breakdown(config: AndreaConfig) -> ParameterBreakdown:
    with torch.device("meta"):
        model = Andrea(config)
    breakdown = ParameterBreakdown(config)
    seen: set[int] = set()
    breakdown.token_embedding = _count(model.token_embed, seen)  # tied: lm_head shares it
    breakdown.position_embedding = _count(model.position_embed, seen)
    for block in range(len(model.blocks)):
        sublayers = {s.kind: s for s in model.sublayers() if s.block == block}
        attention = _count(sublayers["attn"].module, seen)
        mlp_weights = sum(p.numel() for p in sublayers["mlp"].module.parameters() if p.dim() >= 2)
        mlp = _count(sublayers["mlp"].module, seen)
        norms = sum(_count(s.wiring, seen) for s in sublayers.values())  # what the placement adds around them
        breakdown.blocks.append(BlockBreakdown(attention, mlp, norms, mlp_weights))
    breakdown.final_norm = _count(model.final_norm, seen)
    breakdown.output_head = _count(model.lm_head, seen)  # a tied head was counted with the token embedding
    # Every norm, whatever its kind (LayerNorm, RMSNorm, a plugin's), QK norms included.
    breakdown.layer_norms = sum(isinstance(m, (nn.LayerNorm, Norm)) for m in model.modules())
    breakdown.total = sum(p.numel() for p in model.parameters())
    return breakdown


def format_breakdown(b: ParameterBreakdown, name: str) -> str:
    c = b.config
    lines = [
        f"{name}: d_model {c.d_model}, {c.n_layer} layers, {c.n_head} heads, context {c.block_size}, "
        f"vocab {c.vocab_size}, norm placement {c.norm_placement}, activation {c.activation}, "
        f"MLP hidden {mlp_hidden(c)} (ratio {resolved_mlp_ratio(c):g}), backend {c.kernel_backend}",
        "",
    ]
    row = "{:<34}{:>14}"
    first = b.blocks[0] if b.blocks else BlockBreakdown(0, 0, 0, 0)
    same = all(vars(x) == vars(first) for x in b.blocks)
    lines.append(row.format("per block" + ("" if same else " (block 0)"), ""))
    lines.append(row.format("  attention", f"{first.attention:,}"))
    lines.append(row.format("  MLP", f"{first.mlp:,}"))
    lines.append(row.format("    of which weight matrices", f"{first.mlp_weights:,}"))
    lines.append(row.format("  norms", f"{first.norms:,}"))
    lines.append(row.format("  block total", f"{first.total:,}"))
    lines.append(row.format(f"MLP weight matrices, {len(b.blocks)} blocks", f"{b.mlp_weights_all_blocks:,}"))
    lines.append(row.format(f"trunk ({len(b.blocks)} blocks)", f"{b.trunk:,}"))
    tied = "tied, once" if b.config.tie_embeddings else "input only"
    lines.append(row.format(f"token embedding ({tied})", f"{b.token_embedding:,}"))
    lines.append(row.format("position embedding", f"{b.position_embedding:,}"))
    lines.append(row.format("final norm", f"{b.final_norm:,}"))
    if not b.config.tie_embeddings:
        lines.append(row.format("output head (untied)", f"{b.output_head:,}"))
    lines.append(row.format("total", f"{b.total:,}"))
    lines.append(row.format("norms", f"{b.layer_norms}"))
    return "\n".join(lines)


def spec_check(b: ParameterBreakdown) -> str:
    """Compare with the ANDREA-120M table, and say plainly that "120M" is a name, not the count."""
    measured = {
        "mlp_weights_per_block": b.blocks[0].mlp_weights,
        "mlp_weights_all_blocks": b.mlp_weights_all_blocks,
        "layer_norms": b.layer_norms,
        "trunk": b.trunk,
        "total": b.total,
    }
    lines = ["", "against the ANDREA-120M spec table:"]
    for key, expected in SPEC_120M.items():
        mark = "ok" if measured[key] == expected else "DIFFERS"
        lines.append(f"  {key:<24}{measured[key]:>14,}  spec {expected:>12,}  {mark}")
    untied = b.total + b.token_embedding
    lines += [
        "",
        f'"120M" is a name, not the count: the model has {b.total:,} parameters. The original',
        "description's embedding figure (8449x768x2, ~13M) counts the tied input/output matrix",
        f"twice; even counted twice the total would be {untied:,}, still not 120M.",
    ]
    return "\n".join(lines)
