"""The run's tokenizer as a transformers fast tokenizer, and a Hugging Face directory's tokenizer back.

ANDREA's tokenizers are already ``tokenizers.Tokenizer`` objects (byte-level BPE or bytes), so the
export wraps the same object in ``PreTrainedTokenizerFast`` for its configuration files and writes
``tokenizer.json`` as the run's tokenizer unchanged, and ``AutoTokenizer.from_pretrained`` gives the same ids.
``<|endoftext|>``
is bos and eos. A literal "<|endoftext|>" in text encodes as its bytes, as in andrea
(``split_special_tokens``), so a prompt gives the same ids in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from tokenizers import Tokenizer

from andrea_lab.data.tokenizer import END_OF_TEXT, TokenizerError, load_tokenizer, save_tokenizer, tokenizer_from_json
from andrea_lab.files import write_json_atomic

#: The class name both transformers 4 and 5 resolve to the fast tokenizer over ``tokenizer.json``
#: (transformers 5 writes its new name, ``TokenizersBackend``, which transformers 4 does not know).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
#: Files from which transformers builds a GPT-2 tokenizer: the fast one, or GPT-2's vocab and merges.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")


def save_fast_tokenizer(tokenizer: Tokenizer, directory: Path, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json for AutoTokenizer."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer.to_str()),  # a copy: transformers may adjust its object
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        model_max_length=model_max_length,
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(directory)
    # tokenizer.json is the run's own, byte for byte: transformers 5 adds a (no-op) post-processor to the
    # object it wraps, and an import of the directory must give back exactly the tokenizer that was exported.
    save_tokenizer(tokenizer, directory / "tokenizer.json")
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = TOKENIZER_CLASS
    write_json_atomic(config_path, config)
    special = directory / "special_tokens_map.json"
    if not special.exists():  # transformers 5 no longer writes it; transformers 4 and other tools read it
        write_json_atomic(special, {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT})


def read_tokenizer(path: Path) -> tuple[Optional[Tokenizer], str]:
    """The tokenizer of a Hugging Face directory (or a tokenizer.json), as andrea uses it, and what was read;
    ``(None, why)`` when the directory has no tokenizer files. A tokenizer without ``<|endoftext|>``, which
    andrea's tokenizers separate documents with, raises :class:`TokenizerError`."""
    if path.is_file():
        return load_tokenizer(path), str(path)
    if (path / "tokenizer.json").is_file():
        return load_tokenizer(path / "tokenizer.json"), str(path / "tokenizer.json")
    if not (path / "vocab.json").is_file():
        return None, f"{path} has no tokenizer files ({' or '.join(TOKENIZER_FILES)})"
    from transformers import AutoTokenizer

    try:
        fast = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        text = fast.backend_tokenizer.to_str()
    except Exception as exc:  # transformers raises many kinds on a malformed vocab.json/merges.txt
        raise TokenizerError(
            f"{path}: transformers could not build its tokenizer from vocab.json: {type(exc).__name__}: {exc}"
        ) from None
    return tokenizer_from_json(text), f"{path / 'vocab.json'} (converted to a fast tokenizer)"
