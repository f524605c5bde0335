"""Variants of ad-hoc fits, named by what differs in their configs.

A sweep says which variant each run trains (``sweep-run.json``); plain ``andrea fit`` runs under one
experiment name do not: ``runs/quickstart/version_0`` (the quickstart) and ``version_1`` (the same with
``--model.config.activation swiglu``) share the experiment directory, yet they are two variants. Such runs
are grouped here by their resolved configs (each run's ``config.yaml``): the keys whose values differ
between the runs of one experiment name the variants (``activation=swiglu``), and the learning rate and
seed stay the comparison's axes, never part of a name. A run whose config sets ``summary.variant`` is
called that instead.

Two counted runs of one variant at one learning rate and seed are repeats of one fit: the newest counts
and the older ones are listed as ``superseded`` (a comparison needs one number per cell).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import pandas as pd

from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare.stats import COUNTED_STATUSES
from andrea_lab.safe_yaml import read_yaml

CONFIG_FILE = "config.yaml"
SUPERSEDED = "superseded"
#: Keys of a resolved config that never make two fits different variants: the comparison's axes (learning
#: rate, seeds), where runs are written and how progress is shown, whether the held-out evaluation ran (a run
#: without it is set aside, not a variant of its own), and the run identity itself.
AXES_AND_PLUMBING = re.compile(
    r"^(seed_everything|model\.lr|data\.seed|ckpt_path|config|print_config|summary\..*|checkpoint\.dirpath"
    r"|data\.(cache_dir|num_workers)|heldout\.enabled|trainer\.(logger|callbacks|default_root_dir|enable_progress_bar"
    r"|enable_model_summary|log_every_n_steps|profiler)(\..*)?)$"
)


def _flatten(prefix: str, values: Any) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        return {prefix: values}
    flat: dict[str, Any] = {}
    for key, value in values.items():
        flat.update(_flatten(f"{prefix}.{key}" if prefix else str(key), value))
    return flat


def run_config(run_dir: Path, record: Any) -> dict[str, Any]:
    """The run's knobs, flat (``model.config.activation``): its ``config.yaml`` where Lightning saved one,
    else what its record carries (the model config and training arguments). The config is read within
    :mod:`andrea_lab.safe_yaml`'s bounds (a handed run's config.yaml may be an alias bomb, a FIFO, /dev/zero);
    one that cannot be read so is no config."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        loaded = read_yaml(path, "a run's config") if os.path.lexists(path) else None
    except UsageError:
        loaded = None
    if isinstance(loaded, Mapping):
        return _flatten("", loaded)
    if record is None:
        return {}
    return _flatten("", {"model": {**record.training, "config": record.config}})


def declared_variant(config: Mapping[str, Any]) -> Optional[str]:
    """``summary.variant`` of a run's config (the name a user gave it), if set."""
    value = config.get("summary.variant")
    return str(value) if value not in (None, "") else None


def _short_value(value: Any) -> str:
    text = str(value)
    return text.split(":", 1)[1] if re.fullmatch(r"[\w.-]+:[\w.-]+", text) else text  # andrea-lab:pre -> pre


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key by its last component where that is unambiguous among ``keys``, else in full."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: (tail if last.count(tail) == 1 else key) for key, tail in zip(keys, last)}


def differing_keys(configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The knobs (not axes or plumbing) whose values are not the same in every config, in a stable order."""
    configs = list(configs)
    keys = sorted({key for config in configs for key in config if not AXES_AND_PLUMBING.match(key)})
    return [key for key in keys if len({_same_value(config.get(key)) for config in configs}) > 1]


def _same_value(value: Any) -> str:
    """A value's identity for "does it differ": a number by its value (``8`` and ``8.0`` from one YAML are one
    setting), a bool as itself (``True`` is not ``1``), anything else by its repr."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def name_by_differences(configs: list[Mapping[str, Any]]) -> list[str]:
    """One variant name per config: ``key=value`` of every knob that differs among them (or ``""``)."""
    keys = differing_keys(configs)
    short = _short_keys(keys)
    return [", ".join(f"{short[key]}={_short_value(config.get(key))}" for key in keys) for config in configs]


def name_adhoc_variants(runs: pd.DataFrame, configs: list[Mapping[str, Any]], explicit: list[bool]) -> pd.DataFrame:
    """``runs`` with the variant of every run that no sweep or ``summary.variant`` named replaced by what
    differs in its config from the other such runs of its experiment (its layout variant)."""
    runs = runs.copy()
    adhoc = [n for n, given in enumerate(explicit) if not given]
    experiments = {}
    for n in adhoc:
        experiments.setdefault((runs.at[runs.index[n], "suite"], runs.at[runs.index[n], "variant"]), []).append(n)
    several = len({variant for _, variant in experiments}) > 1
    for (_, experiment), members in experiments.items():
        names = name_by_differences([configs[n] for n in members])
        for n, name in zip(members, names):
            if name:
                runs.at[runs.index[n], "variant"] = f"{experiment} [{name}]" if several else name
    return runs


def natural_key(path: str) -> tuple:
    """Natural order of run directories: ``version_10`` after ``version_9``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path)))


def supersede_repeats(runs: pd.DataFrame) -> pd.DataFrame:
    """Of counted runs sharing (suite, scale, variant, LR, seed), the newest counts; the others become ``superseded``
    with ``superseded_by`` naming the run that replaced them."""
    runs = runs.copy()
    runs["superseded_by"] = None
    counted = runs[runs["status"].isin(COUNTED_STATUSES) & runs["lr"].notna()]
    cell_keys = ["suite", *(["scale"] if "scale" in runs else []), "variant", "lr", "seed"]  # one per scale too
    for _, cell in counted.groupby(cell_keys, dropna=False, sort=False):
        if len(cell) < 2:
            continue
        ordered = sorted(cell.index, key=lambda i: natural_key(runs.at[i, "path"]))
        for older in ordered[:-1]:
            runs.at[older, "status"] = SUPERSEDED
            runs.at[older, "superseded_by"] = Path(runs.at[ordered[-1], "path"]).name
    return runs
