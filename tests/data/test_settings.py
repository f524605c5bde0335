"""The data module's settings as one validated value: the tokenizer parsed, every range checked
before any slow work, one DataConfigError naming the value."""

from __future__ import annotations

import inspect

import pytest

from andrea_lab.data.settings import DataConfigError, DataSettings
from andrea_lab.data.tokenizer_spec import TokenizerSpec

ARGUMENTS = dict(
    corpus="stdlib",
    batch_size=4,
    block_size=32,
    vocab_size=257,
    val_fraction=0.1,
    seed=0,
    samples_per_epoch=None,
    max_val_batches=2,
    num_workers=0,
    cache_dir=None,
    text_field="text",
)


def test_the_settings_hold_the_parsed_tokenizer() -> None:
    settings = DataSettings.of(tokenizer="byte", **ARGUMENTS)
    assert settings.tokenizer == TokenizerSpec("byte") and settings.vocab_size == 257
    with pytest.raises(AttributeError):
        settings.seed = 1  # frozen: nothing changes a setting after it was checked


@pytest.mark.parametrize(
    "tokenizer, overrides, pattern",
    [
        ("byte", {"batch_size": 0}, r"batch_size must be positive, got 0"),
        ("byte", {"val_fraction": 1.0}, r"val_fraction must be strictly between 0 and 1, got 1.0"),
        ("byte", {"vocab_size": 300}, r"tokenizer 'byte' has 257 ids but vocab_size is 300"),
        ("nope.json", {}, r"tokenizer 'nope.json' is not 'bpe', 'byte', or an existing tokenizer.json file"),
        ("byte", {"corpus": " "}, r"corpus must name the data, got ' '"),
        # 2**80 overflowed torch.Generator's int64 mid-fit, after the run directory was claimed.
        ("byte", {"seed": 2**80}, r"seed must be an integer from 0 to 4294967295, got 1208925819614629174706176"),
        ("byte", {"seed": -1}, r"seed must be an integer from 0 to 4294967295, got -1"),
    ],
)
def test_a_bad_value_is_one_data_config_error(tokenizer: str, overrides: dict, pattern: str) -> None:
    with pytest.raises(DataConfigError, match=pattern):
        DataSettings.of(tokenizer=tokenizer, **{**ARGUMENTS, **overrides})


def test_the_data_module_keeps_each_argument_once():
    """In its validated settings (and Lightning's hparams record); the attributes read the settings."""
    from andrea_lab.data import AndreaDataModule

    data = AndreaDataModule(corpus="stdlib", tokenizer="byte", vocab_size=257, batch_size=4, seed=7)
    arguments = set(inspect.signature(AndreaDataModule.__init__).parameters) - {"self"}
    assert not arguments & set(vars(data)), "an argument copied onto the instance"
    assert (data.batch_size, data.seed, data.vocab_size, data.corpus_spec, data.tokenizer_spec) == (
        4,
        7,
        257,
        "stdlib",
        "byte",
    )
    assert data.settings.batch_size == data.hparams["batch_size"] == 4
