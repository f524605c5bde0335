"""A few lines of text sampled from the model a fit ends with, printed in its closing lines: the quickest
check a newcomer has that the model learned something (indented ``def``/``return`` lines on Python), before
any chart. The record and the checkpoints do not change: the sample draws from its own seeded generator,
in inference mode, and puts the model back in the mode it was in."""

from __future__ import annotations

from typing import Any, Optional

import torch

from andrea_lab.data.strata import CODE, PROSE

#: What the sample continues, by the kind of text the held-out documents mostly are (andrea_lab.data.strata): a
#: function definition on code, a sentence on English prose ('def ' on prose would ask for what it never saw).
PROMPTS = {CODE: "def ", PROSE: "The "}
#: Code's, where the strata are not known (no held-out evaluation, a record from before them).
PROMPT = PROMPTS[CODE]
SAMPLE_TOKENS = 64
SAMPLE_LINES = 8
TEMPERATURE = 0.8
TOP_K = 50
SEED = 0


def prompt_for(strata: Optional[dict]) -> str:
    """The prompt for a run whose held-out strata are ``strata`` (summary.json ``heldout.strata``,
    ``{stratum: {"tokens": ...}}``): that of the stratum with the most tokens; :data:`PROMPT` when unknown."""
    tokens = {name: (value or {}).get("tokens") or 0 for name, value in (strata or {}).items() if name in PROMPTS}
    return PROMPTS[max(tokens, key=tokens.get)] if any(tokens.values()) else PROMPT


def closing_sample(
    model: torch.nn.Module, tokenizer: Any, prompt: str = PROMPT, max_new_tokens: int = SAMPLE_TOKENS
) -> Optional[str]:
    """``prompt`` continued by ``max_new_tokens`` sampled tokens (seeded, temperature 0.8, top-50), at most
    ``SAMPLE_LINES`` lines; None when there is nothing to sample with (no tokenizer, no ``generate``)."""
    if tokenizer is None or max_new_tokens <= 0 or not hasattr(model, "generate"):
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([tokenizer.encode(prompt).ids], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(SEED)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens, temperature=TEMPERATURE, top_k=TOP_K, generator=generator)
    finally:
        model.train(was_training)
    text = tokenizer.decode(out[0].tolist(), skip_special_tokens=False)
    return "\n".join(text.splitlines()[:SAMPLE_LINES])
