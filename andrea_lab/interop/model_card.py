"""The model card (README.md) of an exported directory: what was trained, on what, and how well.

Everything in it is read from the checkpoint (its config, step, the run summary callback's tokens
seen and validation history) and, when the checkpoint sits in a run directory whose ``summary.json``
describes the same step, the held-out loss of the end-of-fit evaluation. Nothing is estimated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from andrea_lab.model.components import mlp_hidden, resolved_mlp_ratio
from andrea_lab.model.config import AndreaConfig
from andrea_lab.runs.checkpoint_io import stored_data_state
from andrea_lab.runs.directory import read_record

#: The run summary callback's state in a checkpoint (``RunSummary.state_dict``, keyed by its class name).
SUMMARY_STATE_KEY = "RunSummary"


def card_facts(checkpoint: dict[str, Any], ckpt_path: Path) -> dict[str, Any]:
    """Step, tokens seen, last validation loss and (from a matching run record) the held-out loss."""
    step = int(checkpoint.get("global_step", 0))
    summary = (checkpoint.get("callbacks") or {}).get(SUMMARY_STATE_KEY) or {}
    history = summary.get("val_history") or []
    facts: dict[str, Any] = {
        "checkpoint": str(ckpt_path),
        "step": step,
        "tokens_seen": summary.get("tokens_seen"),
        "val_loss": None,
        "val_step": None,
        "heldout_loss": None,
        "corpus": None,
    }
    if history:
        facts["val_step"], facts["val_loss"] = int(history[-1][0]), float(history[-1][1])
    facts["corpus"] = stored_data_state(checkpoint).get("corpus")
    record = read_record(ckpt_path.resolve().parent.parent)  # runs/<name>/version_N/checkpoints/x.ckpt
    if record is not None and record.steps == step and record.heldout is not None:
        facts["heldout_loss"] = record.heldout.loss
    return facts


def _number(value: Optional[float], unit: str = "") -> str:
    return "not recorded" if value is None else f"{value:.4f}{unit}"


def render(facts: dict[str, Any], config: AndreaConfig, activation_function: str, directory_name: str) -> str:
    """README.md: Hub metadata, the numbers, the architecture, and how to load it."""
    tokens = facts["tokens_seen"]
    val = (
        f"{facts['val_loss']:.4f} (in-training validation at step {facts['val_step']})"
        if facts["val_loss"] is not None
        else "not recorded"
    )
    rows = [
        ("source checkpoint", f"`{facts['checkpoint']}`"),
        ("optimizer steps", str(facts["step"])),
        ("tokens seen", "not recorded" if tokens is None else f"{tokens:,}"),
        ("validation loss (nats/token)", val),
        ("held-out loss (nats/token, end-of-fit evaluation)", _number(facts["heldout_loss"])),
        ("training corpus", f"`{facts['corpus']}`" if facts["corpus"] else "not recorded"),
    ]
    arch = [
        (name, f"`{getattr(config, name)}`")
        for name in (
            "vocab_size",
            "block_size",
            "d_model",
            "n_layer",
            "n_head",
            "norm_placement",
            "activation",
            "bias",
            "layer_norm_eps",
        )
    ]
    arch.insert(5, ("mlp_ratio", f"`{resolved_mlp_ratio(config):g}` (MLP width {mlp_hidden(config)})"))
    table = "\n".join(f"| {name} | {value} |" for name, value in [*rows, *arch])
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags: [andrea-lab, gpt2]
---
# ANDREA, exported from andrea-lab

An ANDREA model trained with andrea-lab and exported with `andrea export --to hf`: a `GPT2LMHeadModel`
(activation_function `{activation_function}`) computing the
same logits, with the run's own tokenizer (`<|endoftext|>` is bos and eos).

| | |
|---|---|
{table}

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{directory_name}")
tokenizer = AutoTokenizer.from_pretrained("{directory_name}")
```
"""
