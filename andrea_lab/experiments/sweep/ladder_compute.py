"""Each rung's training compute, 6·N·D, from what the rung actually trains; rungs must grow in it.

Why 6·N·D (Kaplan et al. 2020): a forward and backward pass cost about 6 FLOPs per non-embedding parameter
per token, so it is the x axis of every scaling trend and of DataDecide's compute ratio. N is counted from
the model itself, built on the meta device from the rung's parsed config (no number retyped, no memory
allocated), without the embeddings (the tied output head shares them): the count Kaplan's laws use. D is
the tokens trained: ``trainer.max_steps × data.batch_size × block_size`` (× gradient accumulation). Both are
read from the reference variant's command at each rung, as the preflight parses it (the base config, then
every override in order), so a rung's compute is that of what runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from andrea_lab.experiments.sweep import preflight
from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.experiments.sweep.suite import Suite, SuiteError


@dataclass(frozen=True)
class RungCompute:
    rung: str
    parameters: int  # non-embedding
    tokens: int

    @property
    def flops(self) -> float:
        return 6.0 * self.parameters * self.tokens


def non_embedding_parameters(model_config) -> int:
    """Parameters of the model ``model_config`` builds, less its embeddings (counted on the meta device)."""
    # both need torch: the dry run of a suite without a ladder starts without it
    import torch

    from andrea_lab.model.transformer import Andrea  # torch too

    with torch.device("meta"):
        model = Andrea(model_config)
    embedded = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embedded)


def _value(config, dotted: str) -> Optional[int]:
    node = config
    for part in dotted.split("."):
        node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
        if node is None:
            return None
    return int(node)


def rung_compute(spec: RunSpec) -> RungCompute:
    """N and D of the run ``spec`` plans."""
    config = preflight.parsed_config(spec.fit_args)
    model_config = preflight.model_config_from(config)
    steps, batch = _value(config, "trainer.max_steps"), _value(config, "data.batch_size")
    if steps is None or steps <= 0 or batch is None:
        raise SuiteError(
            f"rung {spec.scale!r}: a ladder's rung needs trainer.max_steps and data.batch_size to count its "
            f"tokens, got max_steps {steps}, batch_size {batch}"
        )
    accumulate = _value(config, "trainer.accumulate_grad_batches") or 1
    tokens = steps * batch * accumulate * int(model_config.block_size)
    return RungCompute(str(spec.scale), non_embedding_parameters(model_config), tokens)


def ladder_compute(suite: Suite, specs: Sequence[RunSpec]) -> list[RungCompute]:
    """Each rung's compute, in the suite's order, read from the reference variant's first planned run there
    (a rung not planned, e.g. left out by ``--scales``, is left out)."""
    first: dict[str, RunSpec] = {}
    for spec in specs:
        if spec.variant == suite.reference and spec.scale is not None:
            first.setdefault(spec.scale, spec)
    return [rung_compute(first[scale.name]) for scale in suite.scales if scale.name in first]


def check_growth(rungs: Sequence[RungCompute], where: str) -> None:
    """Every rung trains with more compute than the one before it, else one line naming both."""
    for lower, upper in zip(rungs, rungs[1:]):
        if upper.flops <= lower.flops:
            raise SuiteError(
                f"{where}: ladder rung {upper.rung!r} trains with 6·N·D = {upper.flops:.3g} FLOPs, not more than "
                f"rung {lower.rung!r} before it ({lower.flops:.3g}); order the rungs by compute"
            )


def describe(rungs: Sequence[RungCompute]) -> list[str]:
    """One line per rung: N, D, 6·N·D and its ratio to the lowest rung."""
    lowest = rungs[0].flops if rungs else 1.0
    return [
        f"ladder rung {r.rung}: N = {r.parameters:,} non-embedding parameters, D = {r.tokens:,} tokens, "
        f"6·N·D = {r.flops:.3g} FLOPs ({r.flops / lowest:.1f}x the lowest)"
        for r in rungs
    ]


def for_sweep(suite: Suite, specs: Sequence[RunSpec]) -> list[str]:
    """What ``andrea sweep`` prints for a ladder before any run, after refusing rungs that do not grow; nothing
    for a suite without a ladder."""
    if suite.ladder is None:
        return []
    rungs = ladder_compute(suite, specs)
    check_growth(rungs, str(suite.path))
    return describe(rungs)
