"""Starting a fit from another model's weights (``model.init_from``): weights only, checked first.

Lightning's ``--ckpt_path`` resumes a run: it expects the optimizer, loop and scheduler state of that
run. Fine-tuning or continuing to pretrain an imported (or any earlier) model is a *new* run that
starts from its weights, so the checkpoint is read through andrea's one safe loader, its architecture
is compared with the new run's ``model.config``, and its tokenizer with the data's: weights read for
another tokenizer's ids would be silently meaningless.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from tokenizers import Tokenizer

from andrea_lab.errors import UsageError
from andrea_lab.model.components import architecture_differences
from andrea_lab.runs.checkpoint_io import load_checkpoint, stored_model_config, stored_tokenizer


class InitialWeights:
    """The state dict, saved config and tokenizer of the checkpoint named by ``model.init_from``."""

    def __init__(self, path: str):
        self.path = path
        checkpoint = load_checkpoint(path)
        state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
        if not isinstance(state, dict) or not state:
            raise UsageError(
                f"model.init_from {path} holds no model weights (no state_dict); pass a checkpoint "
                f"written by `andrea fit` or `andrea import`"
            )
        self.state_dict: dict[str, torch.Tensor] = state
        self.saved_config: Optional[dict[str, Any]] = stored_model_config(checkpoint)
        self.tokenizer: Optional[Tokenizer] = stored_tokenizer(checkpoint)

    @classmethod
    def load_into(cls, module: torch.nn.Module, path: str) -> "InitialWeights":
        """Load ``path``'s weights into ``module`` (an AndreaLM: its ``config`` and its weights), after checking
        its architecture is ``module.config``'s (typed as a Module: this file is below fit.module, even for types);
        returns what :meth:`check_data` needs later (the weights themselves are dropped)."""
        initial = cls(path)
        differences = architecture_differences(module.config, initial.saved_config)
        if differences:
            raise initial.architecture_error(differences)
        try:
            module.load_state_dict(initial.state_dict)
        except RuntimeError as exc:  # no saved config to compare (a foreign state dict): the shapes speak
            raise initial.architecture_error([str(exc).splitlines()[-1].strip()]) from None
        initial.state_dict = {}
        return initial

    def check_data(self, datamodule: Any) -> None:
        """:meth:`check_tokenizer` against a data module's tokenizer, once it knows one (another data
        module, or one that knows none yet, is not checked)."""
        try:
            tokenizer = datamodule.tokenizer
        except (AttributeError, RuntimeError):
            return
        self.check_tokenizer(tokenizer, str(getattr(datamodule, "tokenizer_spec", "")))

    def architecture_error(self, differences: list[str]) -> UsageError:
        return UsageError(
            f"model.init_from {self.path} holds a model of another architecture than model.config ("
            + "; ".join(differences)
            + "); set those model.config fields to the checkpoint's values "
            "(`andrea import` prints them for an imported model)"
        )

    def check_tokenizer(self, data_tokenizer: Optional[Tokenizer], data_spec: str) -> None:
        """Refuse data whose tokenizer gives ids other than the one these weights were trained with."""
        if self.tokenizer is None or data_tokenizer is None or data_tokenizer.to_str() == self.tokenizer.to_str():
            return
        ours = self.tokenizer.get_vocab()
        theirs = data_tokenizer.get_vocab()
        differing = sum(1 for token, index in ours.items() if theirs.get(token) != index)
        if differing == 0 and len(ours) == len(theirs):
            return
        raise UsageError(
            f"model.init_from {self.path} was trained with another tokenizer than the data's (data.tokenizer "
            f"{data_spec!r}): {differing} of its {len(ours)} tokens have other ids in the data's {len(theirs)}, so "
            f"its embeddings would be read for the wrong tokens. Train on its tokenizer: set data.tokenizer to its "
            f"tokenizer.json (`andrea import` writes one beside the checkpoint)"
        )
