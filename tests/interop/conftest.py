"""Fixtures of the interop tests: tiny random GPT-2 directories in temporary directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpt2_testing import TINY_GPT2, random_gpt2


@pytest.fixture
def gpt2_dir(tmp_path):
    """``gpt2_dir(name, tokenizer=True, **config)``: save a random tiny GPT-2 (and the byte tokenizer)."""

    def save(name: str = "gpt2", tokenizer: bool = True, **overrides) -> Path:
        from andrea_lab.data import byte_tokenizer
        from andrea_lab.interop.hf_tokenizer import save_fast_tokenizer

        directory = tmp_path / name
        random_gpt2(**overrides).save_pretrained(directory)
        if tokenizer:
            save_fast_tokenizer(byte_tokenizer(), directory, model_max_length=TINY_GPT2["n_positions"])
        return directory

    return save
