"""`andrea lens --ckpt PATH`: the logit lens's loss on held-out text after every block of a checkpoint.

Scores the held-out evaluation's own windows (the same split, sample and document units as the held-out
loss in summary.json: the run's heldout.max_tokens and heldout.seed from its config.yaml, else the
defaults) with the stream after the embedding and after each block decoded through the final norm and the
tied unembedding. Prints the loss per depth with its standard error over documents; writes lens.json
beside the run's summary.json (or PATH.lens.json beside a checkpoint outside a run directory), and, in a
run directory, a TensorBoard text (the table) and image (the curve) under lens/ so the runs of a
comparison show their curves side by side. `andrea compare` reads lens.json into the column
"blocks to final (lens)": how many blocks the stream needs to come within 0.1 nat of the final loss.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from andrea_lab.data.heldout import DEFAULT_MAX_TOKENS
from andrea_lab.data.progress import to_stderr
from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare.tensorboard_report import EVENT_PREFIX, _rgb
from andrea_lab.files import write_json_atomic
from andrea_lab.inside.lens import final_norm_description
from andrea_lab.inside.lens_loss import LENS_FILE, TOLERANCE, format_layers, heldout_lens, lens_record, plot_layers
from andrea_lab.runs.directory import read_record
from andrea_lab.safe_yaml import read_yaml

#: The TensorBoard tag of the text and the image (the lens's own event file, suffix EVENT_SUFFIX).
TAG = "lens/heldout_loss"
EVENT_SUFFIX = ".lens"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="andrea lens", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", required=True, help="path of a checkpoint written by `andrea fit`")
    parser.add_argument(
        "--max_tokens",
        type=int,
        default=None,
        help="held-out token budget (default: the run's heldout.max_tokens, else the default)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the windows' sample (default: the run's)")
    parser.add_argument("--batch_size", type=int, default=None, help="windows per forward (default: the data's)")
    parser.add_argument("--out", default=None, help="where to write the JSON record (default: RUN_DIR/lens.json)")
    parser.add_argument(
        "--no-tensorboard",
        dest="tensorboard",
        action="store_false",
        help="do not write the TensorBoard text and image into the run directory",
    )
    parser.add_argument("--json", action="store_true", help="print the record as JSON instead of a table")
    parser.add_argument("--device", default="cpu", help="where to run the model (default cpu)")
    return parser


def run_dir_of(ckpt: Path) -> Optional[Path]:
    """``runs/<name>/version_N`` for a checkpoint in its ``checkpoints/``, else None."""
    candidate = ckpt.resolve().parent.parent
    return candidate if (candidate / "config.yaml").is_file() else None


def run_settings(run_dir: Optional[Path]) -> dict[str, Any]:
    """The run's config.yaml as a dict (empty outside a run directory), read within safe_yaml's bounds: a
    run directory can be handed over, and its config.yaml be a FIFO or an alias bomb."""
    if run_dir is None:
        return {}
    settings = read_yaml(run_dir / "config.yaml", "the run's config.yaml")
    return settings if isinstance(settings, dict) else {}


def own_cache_dir(hparams: dict[str, Any]) -> dict[str, Any]:
    """The stored data settings with the user's own cache directory: a path read from a checkpoint or a run
    record is data, never a place to write (a handed checkpoint could name any directory). Says so when the
    stored one differed."""
    stored = hparams.get("cache_dir")
    if stored is not None:
        print(
            f"lens: not using the cache directory the checkpoint names ({stored}); tokenizing into this "
            "user's own cache (ANDREA_LAB_CACHE or the default)",
            file=sys.stderr,
        )
    return {**hparams, "cache_dir": None}


def datamodule_for(checkpoint: dict, settings: dict, path: str):
    """The data module the checkpoint was trained with, set up (its held-out split memory-mapped)."""
    # Lightning (~3 s): not for `andrea lens --help`
    from andrea_lab.data import AndreaDataModule  # Lightning (~3 s): not for `andrea lens --help`
    from andrea_lab.runs.checkpoint_io import stored_model_config, stored_tokenizer

    hparams = checkpoint.get("datamodule_hyper_parameters") or settings.get("data")
    config = stored_model_config(checkpoint)
    if not hparams or config is None:
        raise UsageError(
            f"{path} records no data module settings or no model config (it was not written by "
            f"andrea fit with an AndreaDataModule), so there is no held-out split to score"
        )
    sizes = {key: config[key] for key in ("block_size", "vocab_size")}
    # the model's sizes where config.yaml leaves them linked; never Lightning's own ``_instantiator``
    hparams = own_cache_dir({**sizes, **{key: value for key, value in hparams.items() if not key.startswith("_")}})
    data = AndreaDataModule(**hparams)
    data.prepare_data()
    data.setup("validate")
    saved = stored_tokenizer(checkpoint)
    if saved is not None and data.tokenizer is not None and saved.to_str() != data.tokenizer.to_str():
        raise UsageError(
            f"the held-out data of {path} ({hparams.get('corpus')!r}) is tokenized differently from "
            f"the checkpoint's tokenizer; its windows would not be the text the model was scored on"
        )
    return data


def write_tensorboard(run_dir: Path, table: str, png: Path, step: int) -> None:
    """The table (Markdown) and the curve (image) as ``lens/heldout_loss``, in the lens's own event file,
    which replaces an earlier one (the run's training events are never touched)."""
    from torch.utils.tensorboard import SummaryWriter

    for old in run_dir.glob(f"{EVENT_PREFIX}*{EVENT_SUFFIX}"):
        old.unlink()
    writer = SummaryWriter(str(run_dir), filename_suffix=EVENT_SUFFIX)
    try:
        writer.add_text(TAG, table, step)
        writer.add_image(TAG, _rgb(png), step, dataformats="HWC")
    finally:
        writer.close()


def _recorded_budget(run_dir: Optional[Path]) -> Optional[int]:
    """The held-out budget the run's own evaluation used (summary.json), for a run whose config left it to
    be sized to the run: the lens then scores the same windows."""
    record = None if run_dir is None else read_record(run_dir)
    budget = None if record is None or record.heldout is None else record.heldout.max_tokens
    return int(budget) if isinstance(budget, int) and budget > 0 else None


def evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], Optional[Path], Any]:
    """Score the checkpoint; returns the record, the run directory (or None) and the layers."""
    from andrea_lab.fit.module import AndreaLM  # Lightning (~3 s): not for `andrea lens --help`
    from andrea_lab.runs.checkpoint_io import load_checkpoint  # Lightning (~3 s): not for `andrea lens --help`

    for name in ("max_tokens", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    checkpoint = load_checkpoint(args.ckpt)
    run_dir = run_dir_of(Path(args.ckpt))
    settings = run_settings(run_dir)
    heldout = settings.get("heldout") or {}
    data = datamodule_for(checkpoint, settings, args.ckpt)
    model = AndreaLM.from_checkpoint(checkpoint, args.ckpt).model.to(torch.device(args.device))
    max_tokens = args.max_tokens or heldout.get("max_tokens") or _recorded_budget(run_dir) or DEFAULT_MAX_TOKENS
    seed = heldout.get("seed", 0) if args.seed is None else args.seed
    dataset = data.heldout_dataset(int(max_tokens), int(seed))
    layers, scored = heldout_lens(
        model, dataset, args.batch_size or heldout.get("batch_size") or data.batch_size, say=to_stderr
    )
    record = lens_record(
        layers,
        {**scored, "max_tokens": int(max_tokens)},
        str(args.ckpt),
        int(checkpoint.get("global_step", 0)),
        final_norm_description(model),
    )
    record["norm_placement"] = model.config.norm_placement
    return record, run_dir, layers


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    record, run_dir, layers = evaluate(args)
    out = Path(args.out) if args.out else (run_dir / LENS_FILE if run_dir else Path(f"{args.ckpt}.lens.json"))
    write_json_atomic(out, record)
    table = format_layers(layers)
    if run_dir is not None and args.tensorboard:
        png = plot_layers(
            layers,
            out.with_suffix(".png"),
            f"{record['norm_placement']}: logit-lens loss on held-out text, step {record['step']}",
        )
        write_tensorboard(run_dir, table, png, record["step"])
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    scored = record["heldout"]
    print(
        f"logit lens on held-out text: {scored['tokens']:,} tokens, {scored['windows']} windows, SE over "
        f"{scored['documents']} {scored['se_unit']}; decoded through {record['decoded_through']}"
    )
    print(table)
    blocks = record["lens_blocks_to_final"]
    print(f"within {TOLERANCE} nat of the final loss after {blocks} of {len(layers) - 1} blocks")
    print(f"record: {out}")
    return 0
