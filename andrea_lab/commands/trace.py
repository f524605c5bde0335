"""`andrea trace --ckpt PATH --text TEXT`: follow one token through every block of a checkpoint.

For each sublayer (attention, MLP) of each block, prints the norm of the token's residual stream entering
it, the norm of what the sublayer changes (delta = output - input of its norm/residual wiring), their
ratio and the cosine between delta and stream; optionally plots them (--plot) or prints JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def check_trace_arguments(args: argparse.Namespace) -> None:
    """``--plot`` (a format matplotlib writes, in a directory that can be written) and ``--device``, before
    the checkpoint is read (andrea_lab.commands.arguments)."""
    from andrea_lab.commands.arguments import check_plot_file, checked_device
    from andrea_lab.files import check_output_file

    if args.plot:
        check_plot_file(args.plot)
        check_output_file(args.plot, "--plot")
    checked_device(args.device)


def main(argv: list[str]) -> int:
    from andrea_lab.analysis.trace import format_table, plot_trace, trace_token
    from andrea_lab.checkpoint_io import load_checkpoint
    from andrea_lab.commands.generate import tokenizer_from_checkpoint
    from andrea_lab.module import AndreaLM

    parser = argparse.ArgumentParser(prog="andrea trace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="path of a checkpoint written by `andrea fit`")
    parser.add_argument("--text", required=True, help="the text to run through the model")
    parser.add_argument("--position", type=int, default=-1,
                        help="which token to follow, as a Python index into the text's tokens (default -1: the last)")
    parser.add_argument("--plot", default=None, metavar="PNG", help="also save a plot of the trace to this file")
    parser.add_argument("--json", action="store_true", help="print the trace as JSON instead of a table")
    parser.add_argument("--device", default="cpu", help="where to run the model (default cpu)")
    args = parser.parse_args(argv)
    check_trace_arguments(args)

    try:
        checkpoint = load_checkpoint(args.ckpt)
        tokenizer = tokenizer_from_checkpoint(checkpoint, args.ckpt)
        ids = tokenizer.encode(args.text).ids
        module = AndreaLM(**checkpoint["hyper_parameters"])
        module.load_state_dict(checkpoint["state_dict"])
        model = module.model.to(torch.device(args.device))
        trace = trace_token(model, ids, args.position)
    except ValueError as exc:
        print(f"andrea trace: error: {exc}", file=sys.stderr)
        return 2

    token = tokenizer.decode([trace.token_id], skip_special_tokens=False)
    predicted = tokenizer.decode([trace.next_token_id], skip_special_tokens=False)
    config = model.config
    if args.plot:
        title = (f"{config.norm_placement}/{config.activation}, {config.n_layer} blocks: "
                 f"token {token!r} at position {trace.position}")
        plot_trace(trace, args.plot, title=title)
    if args.json:
        payload = {"ckpt": args.ckpt, "text": args.text, "token": token, "next_token": predicted,
                   "norm_placement": config.norm_placement, **trace.as_dict()}
        if args.plot:
            payload["plot"] = args.plot
        print(json.dumps(payload, indent=2))
        return 0
    print(f"token {token!r} (id {trace.token_id}) at position {trace.position} of {trace.length}; "
          f"{config.norm_placement} norm placement, {config.n_layer} blocks")
    print(format_table(trace))
    print(f"predicts next: {predicted!r} (p = {trace.next_token_prob:.3f})")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
