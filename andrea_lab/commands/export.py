"""`andrea export --ckpt PATH --to hf --out DIR`: a checkpoint as a transformers GPT-2 directory.

DIR loads offline with ``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
and computes the checkpoint's logits. Variants GPT2Config cannot express (post-norm, SwiGLU, no
biases, third-party plugins) are refused, naming each field (docs/hf.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from andrea_lab.files import check_output_dir

#: Export formats (``--to``): so far transformers' GPT-2 directory layout.
FORMATS = ("hf",)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="andrea export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by `andrea fit` (or `andrea import`)")
    parser.add_argument("--to", required=True, choices=FORMATS, help="the format: hf (transformers GPT-2)")
    parser.add_argument("--out", required=True, help="directory to create (must not exist, or be empty)")
    parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="TOKENIZER_JSON",
        help="tokenizer.json to export, for a checkpoint trained on a token file without one",
    )
    args = parser.parse_args(argv)
    # torch and transformers: `andrea export --help` starts without them
    from andrea_lab.interop.export_hf import export_checkpoint

    check_output_dir(args.out, "--out")

    exported = export_checkpoint(Path(args.ckpt), Path(args.out), Path(args.tokenizer) if args.tokenizer else None)
    print(
        f"exported {args.ckpt} -> {exported.directory}/ ({exported.parameters:,} parameters, GPT2LMHeadModel, "
        f"activation_function {exported.activation_function})"
    )
    print(f"files: {', '.join(exported.files)}")
    print(
        f"load it: AutoModelForCausalLM.from_pretrained({str(exported.directory)!r}), "
        f"AutoTokenizer.from_pretrained({str(exported.directory)!r})"
    )
    return 0
