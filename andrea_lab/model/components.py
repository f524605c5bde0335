"""The plugin classes a config's names select, resolved once when a model is built and handed down; and
what needs those classes to answer: the MLP's ratio and width (the activation's default ratio), and whether
a stored config names the same architecture (two names of one entry point, ``pre`` and ``andrea-lab:pre``,
are the same plugin).

The config (andrea_lab.model.config) is a frozen leaf of names and numbers; this module is where names
meet the registry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from andrea_lab.model.config import ARCHITECTURE_FIELDS, AndreaConfig, ConfigError
from andrea_lab.model.contracts import PLUGIN_KINDS, Activation, KernelBackend, Norm, NormPlacement
from andrea_lab.model.registry import resolve, same_plugin


@dataclass(frozen=True)
class Components:
    """The plugin classes of one model, resolved once from the config's names and handed down."""

    norm_placement: type[NormPlacement]
    activation: type[Activation]
    kernel_backend: type[KernelBackend]
    norm: type[Norm]

    def by_kind(self) -> dict[str, type]:
        return {kind: getattr(self, kind) for kind in PLUGIN_KINDS}


def resolve_components(config: AndreaConfig) -> Components:
    """The classes ``config``'s names select (raises :class:`~andrea_lab.model.registry.PluginError`, naming the
    name and what is installed). The registry caches each resolution, so this is cheap to repeat."""
    return Components(*(resolve(kind, getattr(config, kind)) for kind in PLUGIN_KINDS))


def resolved_mlp_ratio(config: AndreaConfig) -> float:
    """``mlp_ratio``, or the selected activation's default when the config leaves it null (4, or 8/3 gated)."""
    return config.mlp_ratio_for(resolve("activation", config.activation))


def mlp_hidden(config: AndreaConfig) -> int:
    """The MLP's hidden size with the selected activation."""
    return config.mlp_hidden_for(resolve("activation", config.activation))


def architecture_differences(config: AndreaConfig, saved: Optional[dict]) -> list[str]:
    """``field: checkpoint X, config Y`` for each of :data:`ARCHITECTURE_FIELDS` where a stored config (a
    checkpoint's) differs from ``config``; none when there is no stored config. A field the stored config lacks
    is at its default: it was written before the field existed. A plugin counts as the same when both names
    select the same entry point (``pre``, ``andrea-lab:pre``)."""
    if not saved:
        return []
    current = asdict(config)
    saved = {**asdict(AndreaConfig()), **saved}
    return [
        f"{name}: checkpoint {saved.get(name)!r}, config {current[name]!r}"
        for name in ARCHITECTURE_FIELDS
        if not _same_field(name, saved.get(name), current[name])
    ]


def check_same_architecture(config: AndreaConfig, saved: Optional[dict]) -> None:
    """Refuse a checkpoint of another architecture with the differing fields, not a shape traceback."""
    differences = architecture_differences(config, saved)
    if differences:
        raise ConfigError(
            "the checkpoint was trained with a different architecture than model.config ("
            + "; ".join(differences)
            + "); use the run's own config.yaml with this "
            "checkpoint, or start a new fit without ckpt_path"
        )


def _same_field(name: str, saved: Any, current: Any) -> bool:
    """Equal values; for a plugin, names that select the same entry point."""
    if saved == current:
        return True
    return (
        name in PLUGIN_KINDS
        and isinstance(saved, str)
        and isinstance(current, str)
        and same_plugin(name, saved, current)
    )
