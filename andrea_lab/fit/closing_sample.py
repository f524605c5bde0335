"""A few lines of text sampled from the model a fit ends with, printed in its closing lines: the quickest
check a newcomer has that the model learned something (indented ``def``/``return`` lines on Python), before
any chart. The record and the checkpoints do not change: the sample draws from its own seeded generator,
in inference mode, and puts the model back in the mode it was in."""

from __future__ import annotations

from typing import Any, Optional

import torch

#: What the sample continues, and how much of it is shown.
PROMPT = "def "
SAMPLE_TOKENS = 64
SAMPLE_LINES = 8
TEMPERATURE = 0.8
TOP_K = 50
SEED = 0


def closing_sample(model: torch.nn.Module, tokenizer: Any, max_new_tokens: int = SAMPLE_TOKENS) -> Optional[str]:
    """``PROMPT`` continued by ``max_new_tokens`` sampled tokens (seeded, temperature 0.8, top-50), at most
    ``SAMPLE_LINES`` lines; None when there is nothing to sample with (no tokenizer, no ``generate``)."""
    if tokenizer is None or max_new_tokens <= 0 or not hasattr(model, "generate"):
        return None
    device = next(model.parameters()).device
    prompt = torch.tensor([tokenizer.encode(PROMPT).ids], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(SEED)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens, temperature=TEMPERATURE, top_k=TOP_K, generator=generator)
    finally:
        model.train(was_training)
    text = tokenizer.decode(out[0].tolist(), skip_special_tokens=False)
    return "\n".join(text.splitlines()[:SAMPLE_LINES])
