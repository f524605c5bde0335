"""What a suite file's keys and names may be: dotted override keys (none of them owned by the sweep), names
that become directory names, the named entries (a variant, a scale) built of both, and the one error type. Kept apart
from :mod:`andrea_lab.experiments.sweep.suite` so that
the parts of a suite with their own module (the scale axis, :mod:`andrea_lab.experiments.sweep.scales`) check their keys
with the same rules without importing the loader that imports them."""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterable, Sequence

from andrea_lab.errors import UsageError

#: Override keys the sweep sets itself, and what to use instead.
RESERVED_KEYS = {
    "model.lr": "the learning rate comes from the suite's lrs: (or --lrs)",
    "seed_everything": "the seed comes from the suite's seeds: (or --seeds)",
    "data.seed": "the data seed is the run's seed, so every variant sees the same batches",
    "trainer.logger": "the sweep chooses each run's directory (--runs-dir)",
    "config": "the base config is the suite's base:",
    # Where a run reads and writes: a handed suite may not point a run at a checkpoint to load (it resumes
    # only its own preempted runs) or at a directory outside its run (andrea_lab.fit.handed).
    "ckpt_path": "each run starts fresh; the sweep resumes its own preempted runs itself",
    "weights_only": "andrea reads every checkpoint weights-only",
    "trainer.default_root_dir": "the sweep chooses each run's directory (--runs-dir)",
    "checkpoint.dirpath": "a run's checkpoints stay in its own directory",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class SuiteError(UsageError):
    """An invalid suite file or grid; the message names the file and the offending key or value."""


def unknown_key_message(where: str, key: Any, valid: Iterable[str]) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(str(key), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(valid)}"


def check_mapping(value: Any, where: str, keys: Sequence[str], expected: str) -> dict[str, Any]:
    """``value`` as a mapping of ``keys`` only, else one line: ``{where} {expected} got {value!r}`` when it is no
    mapping (``expected``: what it must be, e.g. ``must be a mapping with keys a, b,``), the unknown key named."""
    if not isinstance(value, dict):
        raise SuiteError(f"{where} {expected} got {value!r}")
    for key in value:
        if key not in keys:
            raise SuiteError(unknown_key_message(where, key, keys))
    return value


def check_section(value: Any, where: str, keys: Sequence[str], example: str) -> dict[str, Any]:
    """A suite section that must be a mapping of known keys (``extend_grid:``, a variant's ``search:``)."""
    return check_mapping(value, where, keys, f"must be a mapping, {example};")


def check_overrides(overrides: Any, where: str) -> dict[str, Any]:
    """Dotted keys only, none of them owned by the sweep."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise SuiteError(
            f"{where} must be a mapping of dotted keys to values "
            f"(e.g. {{model.config.norm_placement: post}}), got {overrides!r}"
        )
    for key in overrides:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise SuiteError(f"{where}: {key!r} is not a dotted config key such as model.config.n_layer")
        for reserved, why in RESERVED_KEYS.items():
            if key == reserved or key.startswith(reserved + "."):
                raise SuiteError(f"{where}: {key!r} is set by the sweep for every run ({why})")
    return dict(overrides)


def check_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise SuiteError(
            f"{where}: {value!r} is not a valid name (letters, digits and _ . + -, "
            "starting with a letter or digit; it becomes a directory name)"
        )
    if value == "compare":
        raise SuiteError(f"{where}: 'compare' is reserved (it is where `andrea compare` writes by default)")
    if ".interrupted-" in value or ".failed-" in value:
        raise SuiteError(
            f"{where}: {value!r} may not contain '.interrupted-' or '.failed-' (reserved for "
            "run directories moved aside)"
        )
    return value


def named_entry(
    raw: Any, number: int, kind: str, keys: Sequence[str], where: str, seen: dict[str, int]
) -> tuple[str, dict[str, Any]]:
    """Entry ``number`` (from 1) of a list of named ``kind`` s (``variant``, ``scale``): a mapping with only
    ``keys``, a ``name`` that is a valid directory name and not among the names ``seen`` before it (then
    added, with its number), and ``overrides`` of dotted keys. Returns ``(name, overrides)``; the caller
    checks the entry's own keys (a variant's seed_offset, a scale's non-empty overrides)."""
    label = f"{where}: {kind} {number}"
    check_mapping(raw, label, keys, f"must be a mapping with keys {', '.join(keys)},")
    if "name" not in raw:
        raise SuiteError(f"{label} has no name")
    name = check_name(raw["name"], f"{label}: name")
    if name in seen:
        raise SuiteError(f"{where}: duplicate {kind} name {name!r} ({kind}s {seen[name]} and {number})")
    seen[name] = number
    return name, check_overrides(raw.get("overrides"), f"{where}: {kind} {name!r} overrides")
