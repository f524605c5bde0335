"""What a handed checkpoint's (or config's) hyperparameters may hold: plain values, never a class to build.

LightningCLI gives a checkpoint's ``hyper_parameters`` to its parser (``validate``/``test``/``predict``/``fit
--ckpt_path``), and jsonargparse *builds* every ``{class_path, init_args}`` mapping it finds in a value typed
``Any`` (``optimizer_args``, ``schedule_args``: ``dict[str, Any]``), even one spelled as a YAML string: a
weights-only checkpoint could so run ``subprocess.Popen(shell=True)`` or truncate a file through
``logging.FileHandler(mode="w")``. The fit's own components (the module, the data module, the logger and
callbacks a config names in ``trainer.*``) are the only classes built from a config; a checkpoint names
none, and the ``model``/``data`` sections of a config name none either. So any such mapping, at any depth,
is refused in one line naming its key path, before the parser sees the value (:func:`refuse_class_specs`).

Plugins are chosen by name, and a name read from a handed file selects an installed entry point only
(:func:`andrea_lab.model.registry.require_registered`), for every plugin kind: the model's and the
training's (:func:`plugin_names`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator, Optional

import yaml

from andrea_lab.errors import UsageError
from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.model.training_contracts import TRAINING_KINDS
from andrea_lab.safe_yaml import check_bounds

#: The keys that make a mapping a class to build: jsonargparse's subclass spec, and LightningCLI's saved
#: ``_class_path`` (hyperparameters of a module that a subclass-mode CLI trained).
CLASS_KEYS = ("class_path", "_class_path")


class HandedClassError(UsageError):
    """A handed file's settings name a class to build where only plain values belong (exit status 2)."""


def _as_mapping(value: Any) -> Optional[Mapping]:
    """A mapping, or a jsonargparse ``Namespace`` (a parsed config's sections) as one; else None."""
    if isinstance(value, Mapping):
        return value
    as_dict = getattr(value, "as_dict", None)
    return as_dict() if callable(as_dict) else None


def _parsed_string(text: str) -> Any:
    """A string as jsonargparse reads a value typed ``Any``: YAML (``"{class_path: ...}"`` is a mapping).
    Text that is not YAML, or past :mod:`andrea_lab.safe_yaml`'s bounds, stays the string it is."""
    if ":" not in text:  # a mapping needs one; plugin names and paths are read no further
        return text
    try:
        check_bounds(text)
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):
        return text


def class_specs(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """``(key path, class named)`` for every mapping in ``value`` that names a class to build, at any depth,
    through mappings, lists and strings that parse as YAML collections."""
    if isinstance(value, str):
        parsed = _parsed_string(value)
        if not isinstance(parsed, str):
            yield from class_specs(parsed, where)
        return
    mapping = _as_mapping(value)
    if mapping is not None:
        for key in CLASS_KEYS:
            if key in mapping:
                yield f"{where}.{key}", mapping[key]
        for key, item in mapping.items():
            if key not in CLASS_KEYS:
                yield from class_specs(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from class_specs(item, f"{where}[{index}]")


def refuse_class_specs(value: Any, where: str, source: str, allowed: str) -> None:
    """One :class:`HandedClassError` for the first class ``value`` (``source``'s ``where``) names, saying
    what ``allowed`` there instead. Settings nested past Python's recursion limit (a pickle nests without one)
    are refused too: no parser or module could take them."""
    try:
        found = next(class_specs(value, where), None)
    except RecursionError:
        raise HandedClassError(f"{source}: {where} nests its values too deeply to be settings; {allowed}") from None
    if found is not None:
        path, named = found
        raise HandedClassError(
            f"{source}: {path} {str(named)[:200]!r} names a class to build, refused: {allowed}. "
            "Nothing handed is built by class path; remove that entry, or use a file from a source you trust"
        )


#: What a checkpoint's hyperparameters may hold, as the refusal says it.
CHECKPOINT_ALLOWED = (
    "a checkpoint's hyper_parameters are plain values (numbers, strings, lists, mappings) that andrea passes to "
    "AndreaLM and AndreaDataModule, with plugins chosen by registered name"
)


def check_checkpoint_settings(checkpoint: Mapping[str, Any], source: str) -> None:
    """A loaded checkpoint's module and data-module hyperparameters name no class (:func:`refuse_class_specs`)."""
    for key in ("hyper_parameters", "datamodule_hyper_parameters"):
        refuse_class_specs(checkpoint.get(key), key, source, CHECKPOINT_ALLOWED)


def plugin_names(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Every plugin name module hyperparameters choose, by kind: the model's (in ``config``) and training's
    (``optimizer``, ``schedule``), for :func:`andrea_lab.model.registry.require_registered`."""
    config = hparams.get("config")
    model = config if isinstance(config, Mapping) else {}
    return {**{kind: model.get(kind) for kind in PLUGIN_KINDS}, **{kind: hparams.get(kind) for kind in TRAINING_KINDS}}
