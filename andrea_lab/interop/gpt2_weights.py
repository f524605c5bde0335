"""The weights of ANDREA and of a transformers GPT-2: one name table, read in both directions.

ANDREA's linear layers are ``nn.Linear`` (weight ``(out, in)``); GPT-2's are ``Conv1D`` (weight
``(in, out)``), so those matrices are transposed on the way; everything else is the same tensor
under another name. The qkv projection packs q, k, v in the same order on both sides. The output
head is tied to the token embedding on both sides, so it is stored once (``wte``).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from andrea_lab.errors import MissingFileError, UsageError
from andrea_lab.files import load_json
from andrea_lab.interop.gpt2_config import NotImportableError
from andrea_lab.runs.checkpoint_io import load_weights

#: (ANDREA name inside a block, GPT-2 name inside ``h.<i>``, transposed?)
BLOCK_NAMES = (
    ("attn.norm.weight", "ln_1.weight", False),
    ("attn.norm.bias", "ln_1.bias", False),
    ("attn.sublayer.qkv.weight", "attn.c_attn.weight", True),
    ("attn.sublayer.qkv.bias", "attn.c_attn.bias", False),
    ("attn.sublayer.proj.weight", "attn.c_proj.weight", True),
    ("attn.sublayer.proj.bias", "attn.c_proj.bias", False),
    ("mlp.norm.weight", "ln_2.weight", False),
    ("mlp.norm.bias", "ln_2.bias", False),
    ("mlp.sublayer.fc.weight", "mlp.c_fc.weight", True),
    ("mlp.sublayer.fc.bias", "mlp.c_fc.bias", False),
    ("mlp.sublayer.proj.weight", "mlp.c_proj.weight", True),
    ("mlp.sublayer.proj.bias", "mlp.c_proj.bias", False),
)
#: (ANDREA name, GPT-2 name, transposed?) outside the blocks.
MODEL_NAMES = (
    ("token_embed.weight", "wte.weight", False),
    ("position_embed.weight", "wpe.weight", False),
    ("final_norm.weight", "ln_f.weight", False),
    ("final_norm.bias", "ln_f.bias", False),
)
ANDREA_PREFIX, HF_PREFIX = "model.", "transformer."
TIED_ANDREA, TIED_HF = "model.lm_head.weight", "lm_head.weight"
#: GPT-2's causal-mask buffers, stored in older checkpoints (the public ``gpt2`` among them): not weights.
_MASK_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
#: A directory's weights, in the order transformers itself looks for them.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def name_table(n_layer: int) -> list[tuple[str, str, bool]]:
    """Every (ANDREA state-dict key, GPT-2 key without ``transformer.``, transposed?) of an n_layer model."""
    table = [(ANDREA_PREFIX + a, h, t) for a, h, t in MODEL_NAMES]
    for i in range(n_layer):
        table += [(f"{ANDREA_PREFIX}blocks.{i}.{a}", f"h.{i}.{h}", t) for a, h, t in BLOCK_NAMES]
    return table


def to_hf(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's state dict (``transformer.*``; the tied head left out) from AndreaLM's."""
    return {HF_PREFIX + h: (state[a].t() if t else state[a]).contiguous() for a, h, t in name_table(n_layer)}


def from_hf(weights: dict[str, torch.Tensor], expected: dict[str, torch.Size], origin: str) -> dict[str, torch.Tensor]:
    """AndreaLM's state dict from a GPT-2 state dict (with or without ``transformer.``), checked against the
    shapes of the model its config.json describes (``expected``: AndreaLM's state-dict shapes)."""
    plain = {
        key.removeprefix(HF_PREFIX): value
        for key, value in weights.items()
        if not _MASK_BUFFER.match(key.removeprefix(HF_PREFIX))
    }
    head = plain.pop(TIED_HF, None)
    n_layer = sum(1 for key in expected if key.endswith(".attn.norm.weight"))
    table = name_table(n_layer)
    _check_names_and_shapes(plain, table, expected, origin)
    state = {a: (plain[h].t() if t else plain[h]).contiguous().float() for a, h, t in table}
    if head is not None and not torch.equal(head.float(), state[ANDREA_PREFIX + "token_embed.weight"]):
        raise NotImportableError(
            f"{origin}: lm_head.weight differs from the token embedding (wte.weight); "
            f"ANDREA's output head is tied to it, so an untied head cannot be imported"
        )
    state[TIED_ANDREA] = state[ANDREA_PREFIX + "token_embed.weight"]
    return state


def _check_names_and_shapes(
    plain: dict[str, torch.Tensor], table: list[tuple[str, str, bool]], expected: dict[str, torch.Size], origin: str
) -> None:
    """One error listing missing, unexpected and misshapen tensors (the first few of each)."""
    wanted = {h for _, h, _ in table}
    missing = sorted(wanted - plain.keys())
    unexpected = sorted(plain.keys() - wanted)
    misshapen = []
    for a, h, t in table:
        if h in plain:
            shape = tuple(expected[a])[::-1] if t else tuple(expected[a])
            if tuple(plain[h].shape) != shape:
                misshapen.append(f"{h} {tuple(plain[h].shape)} (config.json implies {shape})")
    problems = [
        f"{label}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''} ({len(items)} in all)"
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shapes that disagree", misshapen))
        if items
    ]
    if problems:
        raise NotImportableError(f"{origin} does not hold the GPT-2 its config.json describes: {'; '.join(problems)}")


def read_directory_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face directory, through andrea's safe loader (shards included)."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return load_weights(path)
        weights: dict[str, torch.Tensor] = {}
        for shard in _shard_names(path):
            weights.update(load_weights(directory / shard))
        return weights
    raise MissingFileError(f"{directory} holds no weights: expected one of {', '.join(WEIGHT_FILES)}")


def _shard_names(index: Path) -> list[str]:
    """The shard files an ``*.index.json`` names, each a plain file name inside the directory."""
    try:
        weight_map = load_json(index, "weights index")["weight_map"]  # bounded: a regular file, not a bomb
        names = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(f"{index} is not a weights index (a JSON object with a 'weight_map')") from None
    bad = [name for name in names if not isinstance(name, str) or Path(name).name != name]
    if bad:
        raise UsageError(f"{index} names shard files outside its directory: {bad[:3]}")
    return names
