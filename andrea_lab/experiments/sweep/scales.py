"""A suite's scale axis: the same variants, LR grid and seeds trained at several model sizes.

Why an axis of its own: whether an intervention lowers LR sensitivity is a question about a *trend*
(Wortsman et al. 2023, Figure 1: sensitivity grows with width, and QK-layernorm flattens that growth).
Written as variants (``qk_norm-d64``, ``qk_norm-d128``) the claims would have to be repeated per width and
the comparison would pair a width with another width. As an axis, every claim is judged within each
scale, and ``andrea compare`` shows how its verdict and its interval move from scale to scale.

A scale is a named set of overrides, written like a variant::

    scales:
      - name: d64
        overrides: {model.config.d_model: 64, model.config.n_head: 2}
      - name: d128
        overrides: {model.config.d_model: 128, model.config.n_head: 4}

Dependent fields are stated, never derived: a scale that changes ``d_model`` says its ``n_head`` too
(head size 32 above), so the YAML is what trains and nothing is computed behind the user's back. The
rules :func:`parse_scales` enforces, each with one line naming the offending scale, key or value:

* a non-empty list of mappings with keys ``name`` (a directory name), ``overrides`` (non-empty) and an
  optional ``description``; names unique;
* every scale sets the same keys (an axis changes the same knobs at each of its points);
* no scale key is also set by ``common`` or by a variant's ``overrides`` (one of them would silently win); a
  variant that must differ in a scale key says so rung by rung, ``per_scale: {d64: {key: value}, ...}``
  (:func:`parse_per_scale`), applied after the scale's own overrides and naming only scales the suite has;
* ``d_model`` divisible by ``n_head`` where a scale gives both.

Runs of a scale land in ``<runs-dir>/<suite>/<scale>/<variant>/lr<lr>-seed<seed>/``; a suite without
``scales`` keeps ``<runs-dir>/<suite>/<variant>/...`` (:mod:`andrea_lab.experiments.sweep.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from andrea_lab.experiments.sweep.suite_keys import SuiteError, check_overrides, named_entry

SCALE_KEYS = ("name", "description", "overrides")
D_MODEL, N_HEAD = "model.config.d_model", "model.config.n_head"


@dataclass(frozen=True)
class Scale:
    """One point of the scale axis: its name (a directory under the suite's) and what it overrides."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def describe(self) -> str:
        """``d64 (d_model=64, n_head=2)``: the name and the values that make it this scale."""
        values = ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in self.overrides.items())
        return f"{self.name} ({values})"


def _scale(raw: Any, number: int, where: str, seen: dict[str, int]) -> Scale:
    name, overrides = named_entry(raw, number, "scale", SCALE_KEYS, where, seen)
    if not overrides:
        raise SuiteError(
            f"{where}: scale {name!r} has no overrides; give what makes it this scale, "
            f"e.g. {{{D_MODEL}: 128, {N_HEAD}: 4}}"
        )
    _check_heads(name, overrides, where)
    return Scale(name, overrides, str(raw.get("description") or ""))


def _check_heads(name: str, overrides: Mapping[str, Any], where: str) -> None:
    d_model, n_head = overrides.get(D_MODEL), overrides.get(N_HEAD)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (d_model, n_head)):
        return  # a type error is the fit parser's to name (the sweep's preflight)
    if n_head <= 0 or d_model % n_head:
        raise SuiteError(
            f"{where}: scale {name!r}: {D_MODEL} {d_model} is not divisible by {N_HEAD} {n_head}; give an "
            f"n_head that divides it (head size = d_model / n_head, e.g. {N_HEAD}: {max(1, d_model // 32)})"
        )


def _check_same_keys(scales: list[Scale], where: str) -> None:
    first = scales[0]
    for scale in scales[1:]:
        if set(scale.overrides) != set(first.overrides):
            raise SuiteError(
                f"{where}: scale {scale.name!r} sets {', '.join(scale.overrides)} but scale {first.name!r} sets "
                f"{', '.join(first.overrides)}; every scale must set the same keys"
            )


def check_disjoint(scales: Iterable[Scale], common: Mapping[str, Any], variants: Iterable[Any], where: str) -> None:
    """No key of the scale axis is also set by ``common`` (or ``--set``) or by a variant's overrides."""
    keys = {key for scale in scales for key in scale.overrides}
    owners = [("common", common)] + [(f"variant {v.name!r}", v.overrides) for v in variants]
    for owner, overrides in owners:
        for key in overrides:
            if key in keys:
                raise SuiteError(
                    f"{where}: {owner} sets {key!r}, which the scales set; leave it to the scales (or drop it "
                    "from every scale)"
                )


def parse_per_scale(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    """A variant's ``per_scale:``: a mapping of scale names to overrides (which scales exist is checked with
    the suite's scales, :func:`check_per_scale`)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise SuiteError(f"{where}: per_scale must be a mapping of scale names to overrides, got {raw!r}")
    return {str(name): check_overrides(overrides, f"{where}: per_scale {name!r}") for name, overrides in raw.items()}


def check_per_scale(scales: Iterable[Scale], variants: Iterable[Any], where: str) -> None:
    """Every scale a variant's ``per_scale`` names is one of the suite's."""
    names = [scale.name for scale in scales]
    for variant in variants:
        for name in getattr(variant, "per_scale", {}):
            if name not in names:
                valid = ", ".join(names) if names else "none: the suite has no scales"
                raise SuiteError(f"{where}: variant {variant.name!r}: per_scale names scale {name!r}; scales: {valid}")


def parse_scales(raw: Any, where: str, common: Mapping[str, Any], variants: Iterable[Any]) -> tuple[Scale, ...]:
    """The suite's ``scales:`` checked (module docstring); ``()`` when the suite has none."""
    variants = list(variants)
    if raw is None:
        check_per_scale((), variants, where)
        return ()
    if not isinstance(raw, list):
        raise SuiteError(f"{where}: scales must be a list of {{name: ..., overrides: {{...}}}}, got {raw!r}")
    if not raw:
        raise SuiteError(f"{where}: scales is empty; list at least one, or leave the key out")
    seen: dict[str, int] = {}
    scales = [_scale(item, number, where, seen) for number, item in enumerate(raw, start=1)]
    _check_same_keys(scales, where)
    check_disjoint(scales, common, variants, where)
    check_per_scale(scales, variants, where)
    return tuple(scales)


def choose_scales(scales: tuple[Scale, ...], names: Optional[Iterable[str]], where: str) -> tuple[Optional[Scale], ...]:
    """The scales a sweep runs: all of them, or those ``--scales`` names; ``(None,)`` for a suite without
    the axis (one point with no overrides, so its runs keep the layout without a scale directory)."""
    if names is None:
        return scales or (None,)
    by_name = {scale.name: scale for scale in scales}
    if not by_name:
        raise SuiteError(f"{where}: --scales given but the suite has no scales")
    for name in names:
        if name not in by_name:
            raise SuiteError(f"{where}: no scale named {name!r}; scales: {', '.join(by_name)}")
    return tuple(by_name[name] for name in names)
