"""What a fit that continues from ``--ckpt_path`` may and may not change.

Continuing a fit restores the checkpoint's hyperparameters over the config (LightningCLI's rule), so a
new ``--model.lr`` on ``andrea fit --resume`` would be silently ignored; and a new ``--data.corpus``
would be used for the rest of the run while the record named it for the whole. Both are refused,
naming the field: a changed run is a new run (``--model.init_from`` starts one from the weights).
The fields in :data:`MAY_CHANGE` change how fast, not what, a run computes; the user's value wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from andrea_lab.errors import UsageError
from andrea_lab.model.registry import KINDS, same_plugin

#: ``section.field`` names a resumed fit may set to another value (speed, not results).
MAY_CHANGE = frozenset({"model.compile", "model.config.kernel_backend", "data.num_workers", "data.cache_dir"})


class ResumeOverrideError(UsageError):
    """A resumed fit was asked to change what the checkpoint fixes."""


def _no_options(value: Any) -> bool:
    """None or an empty mapping: a plugin's options left unset (the checkpoint stores ``{}``, the CLI ``null``)."""
    return value is None or (isinstance(value, Mapping) and not value)


def _same(name: str, saved: Any, current: Any) -> bool:
    if _no_options(saved) and _no_options(current):
        return True
    if isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)):
        return list(saved) == list(current)
    if saved == current:
        return True
    kind = name.rsplit(".", 1)[-1]
    return kind in KINDS and isinstance(saved, str) and isinstance(current, str) and same_plugin(kind, saved, current)


def _as_dict(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else value


def differences(prefix: str, saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``prefix.field`` for every field both mappings have and disagree on (nested mappings walked)."""
    found = []
    for key, saved_value in saved.items():
        if key.startswith("_") or key not in current:
            continue
        name, current_value = f"{prefix}.{key}", _as_dict(current[key])
        options = key.endswith("_args")  # a plugin's options: a key added or dropped is a change too
        if isinstance(saved_value, Mapping) and isinstance(current_value, Mapping) and not options:
            found += differences(name, saved_value, current_value)
        elif not _same(name, saved_value, current_value):
            found.append(f"{name} (checkpoint {saved_value!r}, now {current_value!r})")
    return found


def check_resume(ckpt_path: str, checkpoint: Mapping[str, Any], model: Any, data: Any) -> None:
    """Refuse a resumed fit whose model or data settings differ from the checkpoint's, except :data:`MAY_CHANGE`."""
    found = differences("model", checkpoint.get("hyper_parameters") or {}, _as_dict(model) or {})
    found += differences("data", checkpoint.get("datamodule_hyper_parameters") or {}, _as_dict(data) or {})
    refused = [item for item in found if item.split(" ", 1)[0] not in MAY_CHANGE]
    if refused:
        raise ResumeOverrideError(
            f"--ckpt_path {ckpt_path} continues a run, which keeps the checkpoint's settings, but this fit sets "
            f"{'; '.join(refused)}; drop the override to continue the run, or start a new run "
            f"(without --ckpt_path/--resume; --model.init_from {ckpt_path} starts it from these weights)"
        )
