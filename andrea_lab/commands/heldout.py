"""`andrea heldout`: what the held-out score of a configuration is made of, before any run.

Which documents are held out, how many of their tokens the end-of-fit evaluation scores, how much the
largest document carries of the token-weighted loss and of the document-weighted score, and the share of
the held-out side's text found verbatim in training (andrea_lab.data.families). The settings are a fit
YAML's ``data`` and ``heldout`` sections (``--config``), else experiments/cpu-base.yaml's; options given
here win. The corpus is tokenized into the usual cache if it is not there yet.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from andrea_lab.data.families import OVERLAP_BOUND
from andrea_lab.data.judging_split import judging_parts
from andrea_lab.errors import MissingFileError, UsageError
from andrea_lab.safe_yaml import read_yaml

#: experiments/cpu-base.yaml's data and held-out settings: what the comparisons score.
DEFAULTS = {
    "corpus": "stdlib",
    "tokenizer": "byte",
    "vocab_size": 257,
    "block_size": 64,
    "val_fraction": 0.05,
    "max_tokens": 262_144,
    "seed": 0,
    "cache_dir": None,
}
_DATA_KEYS = ("corpus", "tokenizer", "vocab_size", "block_size", "val_fraction", "cache_dir")


def settings_from_yaml(path: str) -> dict[str, Any]:
    """The data and held-out settings a fit YAML sets (``model.config`` gives the linked block and vocab
    sizes; ``heldout.seed`` the sampling seed)."""
    file = Path(path)
    if not file.is_file():
        raise MissingFileError(f"config file {path!r} does not exist")
    document = read_yaml(file, "config file") or {}
    if not isinstance(document, dict):
        raise UsageError(f"{path}: a fit YAML is a mapping (trainer, model, data, ...), got {type(document).__name__}")
    found: dict[str, Any] = {}
    model = _section(document, "model", path)
    config = _section(model.get("init_args", model), "config", path)
    data = _section(document, "data", path)
    heldout = _section(document, "heldout", path)
    found.update({key: config[key] for key in ("block_size", "vocab_size") if key in config})
    found.update({key: data[key] for key in _DATA_KEYS if key in data})
    found.update({key: heldout[key] for key in ("max_tokens", "seed") if heldout.get(key) is not None})
    return found


def _section(document: dict, key: str, path: str) -> dict:
    section = document.get(key) or {}
    if not isinstance(section, dict):
        raise UsageError(f"{path}: {key} must be a mapping, got {type(section).__name__}")
    return section


def composition(settings: dict[str, Any]) -> dict[str, Any]:
    """The held-out split and the planned evaluation of ``settings`` (DEFAULTS' keys), as plain numbers."""
    from andrea_lab.data.datamodule import AndreaDataModule  # Lightning and torch: not for --help or a bad option
    from andrea_lab.data.heldout import MAX_DOCUMENT_SHARE, document_cap  # torch, as above

    data = AndreaDataModule(
        **{key: settings[key] for key in _DATA_KEYS}, batch_size=1, max_val_batches=1, seed=int(settings["seed"])
    )
    data.prepare_data()
    data.setup("fit")
    plan = data.heldout_dataset(int(settings["max_tokens"]), int(settings["seed"])).plan
    counts = np.bincount(plan.units.ravel(), minlength=plan.unit_count).astype(np.float64)
    cap = document_cap(counts)
    weighted = np.minimum(counts, cap)
    names = data.val_document_names()
    entry = data.cache_entry
    manifest = {} if entry is None else entry.manifest
    order = np.argsort(-counts, kind="stable")

    def name(unit: int) -> str:
        index = int(plan.unit_ids[unit])
        return names[index] if names is not None and index < len(names) else f"{plan.se_unit[:-1]} {index}"

    return {
        "settings": settings,
        "split_version": manifest.get("settings", {}).get("split_version"),
        "held_out_documents": None if names is None else len(names),
        "train_documents": None if names is None else len(manifest.get("train_documents", [])),
        "held_out_tokens": int(plan.split_tokens),
        "scored_windows": int(plan.window_starts.size),
        "scored_tokens": int(counts.sum()),
        "scored_units": int(plan.unit_count),
        "unit": plan.se_unit,
        "largest": [
            {"name": name(int(u)), "tokens": int(counts[u]), "token_share": float(counts[u] / counts.sum())}
            for u in order[:5]
        ],
        "document_cap": float(cap),
        "largest_document_share": float(weighted.max() / weighted.sum()),
        "max_document_share": MAX_DOCUMENT_SHARE,
        "strata": _strata(plan, counts, data.val_document_strata()),
        "parts": _strata(plan, counts, _parts(data.val_document_families())),
        "window_overlap": manifest.get("val_window_overlap"),
        "overlap_bound": OVERLAP_BOUND,
    }


def _parts(families: Any) -> Any:
    """Each held-out document's part of the selection/test split (andrea_lab.data.judging_split), or None."""
    return None if families is None else judging_parts(families)


def _labelled(found: dict[str, Any], key: str) -> str:
    """``code 20 documents, 61.0% of the tokens; prose ...`` for the strata or the parts, else ``n/a``."""
    if not found.get(key):
        return "n/a"
    return "; ".join(
        f"{name} {v['documents']} documents, {v['token_share']:.1%} of the tokens" for name, v in found[key].items()
    )


def _strata(plan: Any, counts: np.ndarray, strata: Any) -> Any:
    """``{stratum: {"documents", "token_share"}}`` of the scored documents, None where strata are not known."""
    if strata is None or plan.se_unit != "documents":
        return None
    labels = np.array([strata[int(i)] for i in plan.unit_ids])
    return {
        str(s): {"documents": int((labels == s).sum()), "token_share": float(counts[labels == s].sum() / counts.sum())}
        for s in sorted(set(labels.tolist()))
    }


def format_composition(found: dict[str, Any]) -> str:
    settings = found["settings"]
    largest = found["largest"][0]
    overlap = found["window_overlap"]
    lines = [
        f"held-out composition of {settings['corpus']} (tokenizer {settings['tokenizer']}, "
        f"block {settings['block_size']}, val_fraction {settings['val_fraction']}, "
        f"split version {found['split_version']})",
        f"  held out: {found['held_out_documents'] if found['held_out_documents'] is not None else 'n/a'} documents "
        f"(train {found['train_documents'] if found['train_documents'] is not None else 'n/a'}), "
        f"{found['held_out_tokens']:,} tokens",
        f"  scored: {found['scored_windows']:,} windows, {found['scored_tokens']:,} tokens of {found['scored_units']} "
        f"{found['unit']} (max_tokens {settings['max_tokens']:,}, seed {settings['seed']})",
        f"  largest: {largest['name']}, {largest['token_share']:.1%} of the scored tokens (token-weighted loss); "
        f"{found['largest_document_share']:.1%} of the document-weighted score "
        f"(each document capped at {found['document_cap']:,.0f} tokens; at most {found['max_document_share']:.0%})",
        "  held-out windows found verbatim in training: "
        + ("n/a (not a split by document)" if overlap is None else f"{overlap:.1%}")
        + f" (line-start 64-byte windows; bound {found['overlap_bound']:.0%})",
        "  strata: " + _labelled(found, "strata"),
        "  selection/test split (by family; LRs chosen on selection, verdicts judged on test): "
        + _labelled(found, "parts"),
        "  the five largest: " + "; ".join(f"{d['name']} {d['token_share']:.1%}" for d in found["largest"]),
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="andrea heldout", description=__doc__)
    parser.add_argument("--config", help="a fit YAML whose data and heldout settings to use (default: cpu-base's)")
    for key, value in DEFAULTS.items():
        kind = type(value) if value is not None else str
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, default=None, help=f"default {value}")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    args = parser.parse_args(argv)
    settings = dict(DEFAULTS)
    if args.config:
        settings.update(settings_from_yaml(args.config))
    settings.update({key: getattr(args, key) for key in DEFAULTS if getattr(args, key) is not None})
    found = composition(settings)
    print(json.dumps(found, indent=2) if args.json else format_composition(found))
    return 0
