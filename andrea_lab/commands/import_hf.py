"""`andrea import --from-hf DIR --out PATH.ckpt`: a transformers GPT-2 directory as an andrea checkpoint.

Any GPT2LMHeadModel directory (any vocabulary and size) that ANDREA computes exactly: model_type
gpt2, tanh GELU or ReLU, no layer-index scaling or attention reordering. The checkpoint works with
generate, validate and trace, and a new fit starts from it with --model.init_from PATH.ckpt.
The tokenizer is carried in the checkpoint and written beside it (PATH.tokenizer.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from andrea_lab.files import check_output_file

#: The command is `import`, a Python keyword, so its module is named import_hf (see andrea_lab.cli).
COMMAND = "import"


def fit_arguments(result) -> list[str]:
    """The `andrea fit` overrides that make a new fit's model (and data) match the imported checkpoint."""
    config = result.config
    arguments = [f"--model.init_from {result.checkpoint}"]
    for name in (
        "vocab_size",
        "block_size",
        "d_model",
        "n_layer",
        "n_head",
        "activation",
        "mlp_ratio",
        "layer_norm_eps",
    ):
        value = getattr(config, name)
        arguments.append(f"--model.config.{name} {'null' if value is None else value}")
    if result.tokenizer_file is not None:
        arguments.append(f"--data.tokenizer {result.tokenizer_file}")
    return arguments


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"andrea {COMMAND}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--from-hf",
        required=True,
        metavar="DIR",
        dest="from_hf",
        help="a directory saved by transformers (config.json + model.safetensors or pytorch_model.bin)",
    )
    parser.add_argument("--out", required=True, metavar="PATH.ckpt", help="the checkpoint to write (must not exist)")
    parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="a tokenizer.json or tokenizer directory to carry, when DIR has none",
    )
    args = parser.parse_args(argv)
    # Lightning and transformers: `andrea import --help` starts without them
    from andrea_lab.interop.import_hf import import_directory

    check_output_file(args.out, "--out")

    result = import_directory(Path(args.from_hf), Path(args.out), Path(args.tokenizer) if args.tokenizer else None)
    config = result.config
    print(
        f"imported {args.from_hf} -> {result.checkpoint} ({result.parameters:,} parameters: {config.n_layer} layers, "
        f"d_model {config.d_model}, {config.n_head} heads, vocab {config.vocab_size}, context {config.block_size}, "
        f"{config.activation})"
    )
    if result.tokenizer_file is not None:
        print(
            f"tokenizer: {result.tokenizer_source} -> carried in the checkpoint and written to {result.tokenizer_file}"
        )
    else:
        print(
            f"tokenizer: none ({result.tokenizer_source}). `andrea generate` and `trace` need one to encode "
            f"text: import again with --tokenizer PATH (a tokenizer.json with <|endoftext|>, or a directory "
            f"with one)"
        )
    print("start a fit from it (its weights only; the schedule starts fresh):")
    print("  andrea fit --config YOUR.yaml " + " ".join(fit_arguments(result)))
    return 0
