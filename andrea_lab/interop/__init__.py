"""Hugging Face interop: an ANDREA checkpoint as a ``transformers`` GPT-2 directory, and back.

ANDREA with pre-norm, biases and the tanh GELU (or ReLU) is GPT-2's function class, so the two
directions are a renaming of the same tensors (``nn.Linear`` weights transposed into GPT-2's
``Conv1D`` layout) plus a translation of the config. Each job is one module:

``gpt2_config``   AndreaConfig <-> GPT2Config, and the refusals for what the other side cannot express
``gpt2_weights``  the state-dict mapping (one table, read in both directions) and a directory's weights
``hf_tokenizer``  the run's tokenizer as a transformers fast tokenizer, and a directory's tokenizer back
``model_card``    the README.md an exported directory carries (config, val loss, tokens seen)
``export_hf``     ``andrea export --to hf``: checkpoint -> directory
``import_hf``     ``andrea import --from-hf``: directory -> checkpoint

``transformers`` is an optional extra (``pip install -e '.[hf]'``); :func:`require_transformers`
turns its absence into one clear message.
"""

from __future__ import annotations

import importlib.util

from andrea_lab.errors import UsageError

HF_EXTRA_HINT = "pip install -e '.[hf]'"


def require_transformers() -> None:
    """Raise a :class:`UsageError` that says how to install ``transformers`` when it is missing."""
    if importlib.util.find_spec("transformers") is None:
        raise UsageError(
            f"the Hugging Face interop needs the `transformers` package, which is not installed; "
            f"install the extra with: {HF_EXTRA_HINT}"
        )
