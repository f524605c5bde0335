"""``andrea import --from-hf``: a transformers GPT-2 directory as an andrea checkpoint.

The result is shaped like a checkpoint ``andrea fit`` writes (``state_dict``, ``hyper_parameters``
with the model config, the data module's tokenizer), written atomically with its sha256 manifest, so
``andrea generate``, ``validate`` and ``trace`` read it as they read any checkpoint, and a new fit
starts from it with ``--model.init_from``. The tokenizer also goes beside it as a tokenizer.json, the
file ``data.tokenizer`` takes. Weights are read only through :func:`andrea_lab.runs.checkpoint_io.load_weights`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from tokenizers import Tokenizer

from andrea_lab.data.checkpoint_state import DATA_STATE_KEY, data_checkpoint_state
from andrea_lab.data.tokenizer import TokenizerError, save_tokenizer
from andrea_lab.errors import MissingFileError, UsageError
from andrea_lab.files import load_json, manifest_path
from andrea_lab.fit.module import AndreaLM
from andrea_lab.interop import require_transformers
from andrea_lab.interop.gpt2_config import NotImportableError, andrea_config_from_gpt2
from andrea_lab.interop.gpt2_weights import from_hf, read_directory_weights
from andrea_lab.interop.hf_tokenizer import read_tokenizer
from andrea_lab.model.config import AndreaConfig
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO


@dataclass(frozen=True)
class Imported:
    """What an import wrote (for the command's summary)."""

    checkpoint: Path
    config: AndreaConfig
    parameters: int
    tokenizer_file: Optional[Path]
    tokenizer_source: str


def tokenizer_path_for(out: Path) -> Path:
    """Where the imported tokenizer goes beside the checkpoint: ``gpt2.ckpt`` -> ``gpt2.tokenizer.json``."""
    return out.with_suffix(".tokenizer.json")


def read_gpt2_config(directory: Path) -> AndreaConfig:
    """The AndreaConfig of the GPT-2 a directory's config.json describes (or one error naming what is not)."""
    path = directory / "config.json"
    if not path.is_file():
        raise MissingFileError(
            f"{directory} has no config.json; pass a directory saved by transformers' "
            f"save_pretrained (config.json and model.safetensors or pytorch_model.bin)"
        )
    data = load_json(path, "config.json")
    if not isinstance(data, dict) or data.get("model_type") != "gpt2":
        found = data.get("model_type") if isinstance(data, dict) else None
        raise NotImportableError(
            f"{path} has model_type {found!r}; andrea imports GPT-2 models only (model_type 'gpt2')"
        )
    from transformers import GPT2Config

    return andrea_config_from_gpt2(GPT2Config.from_dict(data), str(path))


def _checked_tokenizer(source: Path, explicit: bool, config: AndreaConfig) -> tuple[Optional[Tokenizer], str]:
    """The tokenizer to carry, and what was read (or why none is carried). One the user named explicitly
    must be usable; a directory's own that is not (no ``<|endoftext|>``) is left behind with the reason."""
    try:
        tokenizer, described = read_tokenizer(source)
    except TokenizerError as exc:
        if explicit:
            raise
        return None, f"not carried: {exc}"
    if tokenizer is None and explicit:
        raise UsageError(f"--tokenizer {source}: {described}")
    if tokenizer is not None and tokenizer.get_vocab_size() > config.vocab_size:
        raise NotImportableError(
            f"the tokenizer ({described}) has {tokenizer.get_vocab_size()} ids but the model "
            f"only {config.vocab_size} (vocab_size in config.json); they do not belong together"
        )
    return tokenizer, described


def _checkpoint(module: Any, tokenizer: Optional[Tokenizer], directory: Path, described: str) -> dict[str, Any]:
    """A dict shaped like the checkpoints ``andrea fit`` writes, at step 0."""
    import lightning

    return {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": lightning.__version__,
        DATA_STATE_KEY: data_checkpoint_state(tokenizer, module.config.vocab_size, corpus=None),
        "andrea_import": {"from_hf": str(directory), "tokenizer": described},
    }


def import_directory(directory: Path, out: Path, tokenizer_source: Optional[Path] = None) -> Imported:
    """Write ``out`` (and its tokenizer.json beside it) from the GPT-2 in ``directory``."""
    require_transformers()
    if not directory.is_dir():
        raise MissingFileError(f"--from-hf {directory} is not a directory; pass one saved by save_pretrained")
    tokenizer_file = tokenizer_path_for(out)
    for path in (out, manifest_path(out), tokenizer_file):  # every file the import creates
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} already exists; an import never overwrites: choose another --out")
    config = read_gpt2_config(directory)
    tokenizer, described = _checked_tokenizer(tokenizer_source or directory, tokenizer_source is not None, config)
    # The shapes config.json implies, from a model on the meta device (no memory): a two-line config.json
    # can describe a model of any size, so nothing is allocated until the weights are found to match it.
    with torch.device("meta"):
        expected = {key: value.shape for key, value in AndreaLM(config=config).state_dict().items()}
    state = from_hf(read_directory_weights(directory), expected, str(directory))
    module = AndreaLM(config=config)
    module.load_state_dict(state)
    AtomicCheckpointIO().save_checkpoint(_checkpoint(module, tokenizer, directory, described), out)
    if tokenizer is not None:
        save_tokenizer(tokenizer, tokenizer_file)
    return Imported(out, config, module.model.num_parameters(), tokenizer_file if tokenizer else None, described)
