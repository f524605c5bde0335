"""Published speed-ups over AdamW against model size, printed beside this project's own
(:mod:`andrea_lab.experiments.compare.speedups`), keyed by the optimizer a variant runs (``model.optimizer``).

The source is Wen, Hall, Ma and Liang 2025, "Fantastic Pretraining Optimizers and Where to Find Them" (Marin;
arXiv 2509.02046): ten optimizers, each tuned by coordinate descent, on Llama-style models of 130M, 300M, 520M and
1.2B parameters at 1-8x the Chinchilla data-to-model ratio, compared at the end of separately planned runs.
Only what its abstract states is written here: the matrix-based optimizers (Muon, Soap) are 1.4x faster than
AdamW at 0.1B parameters and 1.1x at 1.2B. Its per-size figures (Figures 1, 3 and 4: 300M and 520M, each data
ratio, each optimizer's own curve) could not be read here, so none is written, no digit guessed. Lion is among
the optimizers studied but its own figure is not stated in the abstract; what is stated for every optimizer is a
bound: no optimizer in the study was faster than about 1.4x (the study's summary in marin-community/marin issue
1290, "the best was ≈ 1.4× over AdamW"). Schedule-free AdamW and AdamW with LR-independent decay have no figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

WEN_2025 = "Wen et al. 2025 (Marin)"


@dataclass(frozen=True)
class PublishedSpeedup:
    """A published speed-up over AdamW: ``figures`` are (model size as the source writes it, speed-up) pairs, in
    the source's order of size; ``optimizers``: which of the study's optimizers the figures are about."""

    optimizers: str
    figures: tuple[tuple[str, str], ...]
    source: str

    def describe(self) -> str:
        """``1.4x at 0.1B, 1.1x at 1.2B (matrix-based: Muon, Soap)``; the source is named once, under the table."""
        shown = ", ".join(f"{speedup} at {size}" for size, speedup in self.figures)
        return f"{shown} ({self.optimizers})"


PUBLISHED_SPEEDUPS: dict[str, PublishedSpeedup] = {
    "andrea-lab:muon": PublishedSpeedup(
        "matrix-based: Muon, Soap", (("0.1B", "1.4x"), ("1.2B", "1.1x")), f"{WEN_2025}, abstract"
    ),
    "andrea-lab:lion": PublishedSpeedup(
        "a bound on every optimizer studied; Lion's own not stated here",
        (("0.1B-1.2B", "at most ~1.4x"),),
        f"{WEN_2025}, marin-community/marin#1290",
    ),
}


def published_speedup(optimizer: Optional[str]) -> Optional[PublishedSpeedup]:
    """The published speed-up of ``optimizer`` (a ``model.optimizer`` value), None where none is written."""
    return PUBLISHED_SPEEDUPS.get(optimizer) if optimizer else None
