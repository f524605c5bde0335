"""Tiny random transformers GPT-2 models (nothing is downloaded), shared by the interop tests."""

from __future__ import annotations

import torch

#: A GPT-2 small enough to build in milliseconds, with the byte tokenizer's vocabulary.
TINY_GPT2 = dict(
    vocab_size=257,
    n_positions=32,
    n_embd=32,
    n_layer=2,
    n_head=4,
    bos_token_id=256,
    eos_token_id=256,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
)


def random_gpt2(seed: int = 0, **overrides):
    """A GPT2LMHeadModel with every parameter random (biases and LayerNorms too, so each is checked)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**{**TINY_GPT2, **overrides})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model
