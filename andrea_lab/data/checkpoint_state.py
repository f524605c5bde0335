"""The data module's part of a checkpoint: where Lightning stores it (under the data module's class name), the
key of the tokenizer in it, and what it holds. Spelled once, here, for the three that touch it: the data module
writes it, ``andrea import`` writes the same for an imported model, and ``runs.checkpoint_io`` reads it. A module
of its own, so that reading a checkpoint does not import the data module (and Lightning's data machinery)."""

from __future__ import annotations

from typing import Any, Optional

from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib

#: Lightning stores a data module's ``state_dict`` under its class name; the tokenizer is under this key in it.
DATA_STATE_KEY = "AndreaDataModule"
TOKENIZER_STATE_KEY = "tokenizer_json"


def data_checkpoint_state(
    tokenizer: Optional[Tokenizer], vocab_size: Optional[int], corpus: Optional[str]
) -> dict[str, Any]:
    """The data module's part of a checkpoint (under :data:`DATA_STATE_KEY`, read back by
    ``checkpoint_io.stored_data_state``); ``andrea import`` writes the same."""
    return {
        TOKENIZER_STATE_KEY: None if tokenizer is None else tokenizer.to_str(),
        "eot_id": None if tokenizer is None else tokenizers_lib.eot_id(tokenizer),
        "vocab_size": vocab_size,
        "corpus": corpus,
    }
