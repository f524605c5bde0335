"""`andrea trace --ckpt PATH --text TEXT`: follow one token through every block of a checkpoint.

For each sublayer (attention, MLP) of each block, prints

* the geometry: the norm of the token's residual stream entering it, the norm of what the sublayer changes
  (delta = output - input of its norm/residual wiring), their ratio and the cosine between delta and stream;
* the logit lens: the stream after the sublayer decoded through the final norm and the tied unembedding, as
  the model decodes its last stream: the top-k next tokens and the probability and rank of the text's
  actual next token (when the text has one);
* the direct logit attribution: each sublayer's delta projected onto the unembedding row of the predicted
  (or --target) token, through the final norm with its scale frozen at its value for the full stream (the
  standard linearisation); with the embedding and the norm's bias the terms add up to the model's logit.
  With final_logit_softcap set they add up to the PRE-CAP logit z (the cap, cap*tanh(z/cap), is not
  linear); the capped logit and the probability the model outputs are printed next to it, and the lens's
  probabilities are taken through the cap, as the model's own head does.

--plot PNG draws the geometry, --lens-plot PNG the logit-lens heatmap (every position x every sublayer: top-1
token and its probability), --attribution-plot PNG the attribution bars; --json prints all of it. Only the
files named are written, and an existing one only with --overwrite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from andrea_lab.commands.arguments import check_plot_file, checked_device
from andrea_lab.errors import UsageError
from andrea_lab.files import check_output_file
from andrea_lab.inside import lens
from andrea_lab.inside.lens import format_attribution, format_lens
from andrea_lab.inside.lens_plots import plot_attribution, plot_lens_grid
from andrea_lab.inside.trace import format_table, plot_trace, trace_token


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="andrea trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", required=True, help="path of a checkpoint written by `andrea fit`")
    parser.add_argument("--text", required=True, help="the text to run through the model")
    parser.add_argument(
        "--position",
        type=int,
        default=-1,
        help="which token to follow, as a Python index into the text's tokens (default -1: the last)",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="attribute the logit of this token (text that is exactly one token, e.g. ' the'); "
        "default: the token the model predicts",
    )
    parser.add_argument("--top_k", type=int, default=5, help="next tokens the logit lens lists per sublayer")
    parser.add_argument("--plot", default=None, metavar="PNG", help="also save the geometry plot as PNG")
    parser.add_argument("--lens-plot", default=None, metavar="PNG", help="also save the logit-lens heatmap as PNG")
    parser.add_argument(
        "--attribution-plot", default=None, metavar="PNG", help="also save the direct logit attribution as PNG"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace plot files that already exist (default: refuse them)"
    )
    parser.add_argument("--json", action="store_true", help="print the trace as JSON instead of tables")
    parser.add_argument("--device", default="cpu", help="where to run the model (default cpu)")
    return parser


def target_id(tokenizer: Any, target: str) -> int:
    """The id of ``target``, which must encode to exactly one token."""
    ids = tokenizer.encode(target).ids
    if not ids:
        raise UsageError(f"--target {target!r} encodes to no token; give text that is exactly one token")
    if len(ids) != 1:
        pieces = [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
        raise UsageError(
            f"--target {target!r} is not one token: it encodes to {len(ids)} ({pieces!r}); "
            f"give text that is exactly one token, e.g. {pieces[0]!r}"
        )
    return ids[0]


def _load(args: argparse.Namespace):
    # Lightning (~3 s): not for `andrea trace --help`
    from andrea_lab.commands.generate import tokenizer_from_checkpoint
    from andrea_lab.fit.module import AndreaLM
    from andrea_lab.runs.checkpoint_io import load_checkpoint

    checkpoint = load_checkpoint(args.ckpt)
    tokenizer = tokenizer_from_checkpoint(checkpoint, args.ckpt)
    return AndreaLM.from_checkpoint(checkpoint, args.ckpt).model.to(torch.device(args.device)), tokenizer


def analyse(model, tokenizer, args: argparse.Namespace) -> dict[str, Any]:
    """Geometry, lens and attribution of the traced token (the objects; :func:`payload` makes JSON of them)."""
    if args.top_k < 1:
        raise UsageError(f"--top_k must be a positive number of tokens, got {args.top_k}")
    ids = tokenizer.encode(args.text).ids
    trace = trace_token(model, ids, args.position)
    pos = trace.position
    target = trace.next_token_id if args.target is None else target_id(tokenizer, args.target)
    next_id: Optional[int] = ids[pos + 1] if pos + 1 < len(ids) else None
    streams = lens.capture_streams(model, ids)
    return {
        "ids": ids,
        "trace": trace,
        "streams": streams,
        "next_id": next_id,
        "lens": lens.lens_rows(model, streams, pos, next_id, args.top_k),
        "grid": lens.lens_grid(model, streams),
        "attribution": lens.attribute(model, streams, pos, target),
        "decoded_through": lens.final_norm_description(model),
    }


def payload(found: dict[str, Any], model, decode, args: argparse.Namespace, plots: list[str]) -> dict[str, Any]:
    trace, attribution = found["trace"], found["attribution"]
    config = model.config
    result = {
        "ckpt": args.ckpt,
        "text": args.text,
        "token": decode(trace.token_id),
        "next_token": decode(trace.next_token_id),
        "norm_placement": config.norm_placement,
        **trace.as_dict(),
        "actual_next_token": None if found["next_id"] is None else decode(found["next_id"]),
        "lens": {
            "decoded_through": found["decoded_through"],
            "rows": [row.as_dict(decode) for row in found["lens"]],
            "grid": {
                **found["grid"].as_dict(),
                "input_tokens": [decode(i) for i in found["ids"]],
                "top_tokens": [[decode(i) for i in row] for row in found["grid"].top_ids],
            },
        },
        "final_logit_softcap": config.final_logit_softcap,
        "attribution": {
            **attribution.as_dict(),
            "target": decode(attribution.token_id),
            "linearisation": "final-norm scale frozen at its value for the full stream",
        },
    }
    if plots:
        result["plot"], result["plots"] = plots[0], plots
    return result


#: The plot options, each one figure written only when named.
PLOT_OPTIONS = ("plot", "lens_plot", "attribution_plot")


def draw(found: dict[str, Any], model, decode, args: argparse.Namespace) -> list[str]:
    """The figures whose options were given (:data:`PLOT_OPTIONS`), each to the file named; returns their paths."""
    trace, config = found["trace"], model.config
    title = (
        f"{config.norm_placement}/{config.activation}, {config.n_layer} blocks: "
        f"token {decode(trace.token_id)!r} at position {trace.position}"
    )
    ids = found["ids"]
    drawers = {
        "plot": lambda path: plot_trace(trace, path, title=title),
        "lens_plot": lambda path: plot_lens_grid(
            found["grid"],
            [decode(i) for i in ids],
            decode,
            path,
            next_ids=ids[1:],
            title=f"logit lens, {config.norm_placement}: top-1 next token after each sublayer",
        ),
        "attribution_plot": lambda path: plot_attribution(
            found["attribution"], decode(found["attribution"].token_id), path
        ),
    }
    return [str(drawers[option](Path(getattr(args, option)))) for option in PLOT_OPTIONS if getattr(args, option)]


def report(found: dict[str, Any], model, decode) -> str:
    trace, attribution, config = found["trace"], found["attribution"], model.config
    next_token = None if found["next_id"] is None else decode(found["next_id"])
    scale = (
        "no final norm"
        if attribution.scale is None
        else f"final-norm scale frozen at {attribution.scale:.4g}, its value for the full stream"
    )
    capped = "" if attribution.softcap is None else f", of {attribution.attributed}"
    return "\n".join(
        [
            f"token {decode(trace.token_id)!r} (id {trace.token_id}) at position {trace.position} of {trace.length}; "
            f"{config.norm_placement} norm placement, {config.n_layer} blocks",
            format_table(trace),
            f"predicts next: {decode(trace.next_token_id)!r} (p = {trace.next_token_prob:.3f})",
            "",
            f"logit lens: the stream after each sublayer, decoded through {found['decoded_through']}"
            + ("" if next_token is not None else " (the traced token is the text's last: no actual next token)"),
            format_lens(found["lens"], decode, next_token),
            "",
            f"direct logit attribution to {decode(attribution.token_id)!r} ({scale}{capped}):",
            format_attribution(attribution),
        ]
    )


def check_trace_arguments(args: argparse.Namespace) -> None:
    """``--plot`` (a format matplotlib writes, in a directory that can be written) and ``--device``, before
    the checkpoint is read (andrea_lab.commands.arguments)."""
    for option in PLOT_OPTIONS:
        path = getattr(args, option)
        if not path:
            continue
        flag = "--" + option.replace("_", "-")
        check_plot_file(path, flag)
        check_output_file(path, flag)
        if os.path.lexists(path) and not args.overwrite:
            raise UsageError(f"{flag} {path} already exists; pass --overwrite to replace it, or name a new file")
    checked_device(args.device)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    check_trace_arguments(args)
    try:
        model, tokenizer = _load(args)
        found = analyse(model, tokenizer, args)
    except ValueError as exc:  # UsageError included: one line, exit 2
        print(f"andrea trace: error: {exc}", file=sys.stderr)
        return 2

    def decode(token_id: int) -> str:
        return tokenizer.decode([token_id], skip_special_tokens=False)

    plots = draw(found, model, decode, args)
    if args.json:
        print(json.dumps(payload(found, model, decode, args, plots), indent=2))
        return 0
    print(report(found, model, decode))
    for path in plots:
        print(f"plot: {path}")
    return 0
