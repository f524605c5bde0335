"""``andrea export --to hf``: an ANDREA checkpoint as a directory transformers loads offline.

The directory is built beside its destination and renamed into place when complete, so an
interrupted export leaves no half directory under the name, and nothing that exists is overwritten.
The weights go through transformers' own ``GPT2LMHeadModel`` (loaded strictly, then
``save_pretrained``), so the files are exactly what the installed transformers writes and reads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tokenizers import Tokenizer

from andrea_lab.data.tokenizer import eot_id, load_tokenizer
from andrea_lab.errors import UsageError
from andrea_lab.interop import model_card, require_transformers
from andrea_lab.interop.gpt2_config import check_exportable, gpt2_config_kwargs
from andrea_lab.interop.gpt2_weights import TIED_HF, to_hf
from andrea_lab.interop.hf_tokenizer import save_fast_tokenizer
from andrea_lab.model.config import AndreaConfig
from andrea_lab.runs.checkpoint_io import load_checkpoint, stored_model_config, stored_tokenizer


@dataclass(frozen=True)
class Exported:
    """What an export wrote (for the command's summary)."""

    directory: Path
    files: list[str]
    parameters: int
    activation_function: str


def check_new_directory(out: Path) -> None:
    """An export writes a new directory (or fills an empty one); it never replaces anything."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(
            f"--out {out} already exists and is not an empty directory; an export never overwrites: "
            f"choose a new directory or remove that one"
        )


def _tokenizer(checkpoint: dict[str, Any], ckpt: Path, given: Optional[Path], config: AndreaConfig) -> Tokenizer:
    """The run's tokenizer (or the one given), which must fit the model's vocabulary."""
    tokenizer = load_tokenizer(given) if given is not None else stored_tokenizer(checkpoint)
    if tokenizer is None:
        raise UsageError(
            f"{ckpt} carries no tokenizer (its fit read a token file without one); pass the "
            f"tokenizer.json that made the token file: --tokenizer PATH"
        )
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise UsageError(
            f"the tokenizer has {tokenizer.get_vocab_size()} ids but the model only "
            f"{config.vocab_size} (vocab_size); pass the tokenizer the model was trained with"
        )
    return tokenizer


def _gpt2_model(checkpoint: dict[str, Any], config: AndreaConfig, eot: int):
    """transformers' GPT2LMHeadModel holding the checkpoint's weights (every tensor assigned, or an error)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per file of a 2-second export is noise in a CLI
    model = GPT2LMHeadModel(GPT2Config(**gpt2_config_kwargs(config, eot)))
    result = model.load_state_dict(to_hf(checkpoint["state_dict"], config.n_layer), strict=False)
    missing = [
        key for key in result.missing_keys if key != TIED_HF and not key.endswith((".attn.bias", ".masked_bias"))
    ]
    if missing or result.unexpected_keys:  # the name table and transformers disagree: a bug, not bad input
        raise RuntimeError(
            f"GPT2LMHeadModel weights not mapped: missing {missing}, unexpected {result.unexpected_keys}"
        )
    model.tie_weights()
    return model.eval()


def _make_readable(directory: Path) -> None:
    """Give the directory and its files the modes a plain mkdir/open would (umask applied): mkdtemp and
    atomic writes create them private to their writer, and an export is made to be shared."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for path in directory.iterdir():
        os.chmod(path, 0o666 & ~umask)


def export_checkpoint(ckpt: Path, out: Path, tokenizer_path: Optional[Path] = None) -> Exported:
    """Write ``out``: config.json, generation_config.json, model.safetensors, the tokenizer files, README.md."""
    require_transformers()
    check_new_directory(out)
    checkpoint = load_checkpoint(ckpt)
    saved = stored_model_config(checkpoint)
    if not isinstance(saved, dict) or "state_dict" not in checkpoint:
        raise UsageError(
            f"{ckpt} is not an andrea checkpoint (no model config in its hyper_parameters, or no "
            f"state_dict); pass one written by `andrea fit` or `andrea import`"
        )
    config = AndreaConfig(**saved)
    check_exportable(config)
    tokenizer = _tokenizer(checkpoint, ckpt, tokenizer_path, config)
    model = _gpt2_model(checkpoint, config, eot_id(tokenizer))
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        model.save_pretrained(staging)
        save_fast_tokenizer(tokenizer, staging, model_max_length=config.block_size)
        card = model_card.render(
            model_card.card_facts(checkpoint, ckpt), config, model.config.activation_function, out.name
        )
        (staging / "README.md").write_text(card, encoding="utf-8")
        _make_readable(staging)
        check_new_directory(out)  # again: nothing appeared there meanwhile
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Exported(
        out,
        sorted(p.name for p in out.iterdir()),
        sum(p.numel() for p in model.parameters()),
        model.config.activation_function,
    )
