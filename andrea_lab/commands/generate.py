"""`andrea generate --ckpt PATH --prompt TEXT`: sample text from a training checkpoint.

The checkpoint carries everything needed: the model's hyperparameters (``save_hyperparameters``)
and the tokenizer (saved by ``AndreaDataModule.state_dict``), so no config or corpus is required.
"""

from __future__ import annotations

import argparse

from andrea_lab.commands.arguments import checked_device
from andrea_lab.errors import UsageError


def tokenizer_from_checkpoint(checkpoint: dict, path: str):
    from andrea_lab.runs.checkpoint_io import stored_tokenizer  # Lightning (~5 s): not for `--help`

    tokenizer = stored_tokenizer(checkpoint)
    if tokenizer is None:
        raise UsageError(
            f"{path} carries no tokenizer (it was trained on a token file without a "
            f"tokenizer.json, or not by an AndreaDataModule fit); nothing to decode with"
        )
    return tokenizer


#: The lowest temperature other than 0: below it the logits divided by it overflow float32 to inf (sampling
#: then fails on NaN probabilities), and sampling is greedy in all but name anyway.
MIN_TEMPERATURE = 1e-3
#: torch.Generator seeds are unsigned 64-bit numbers.
MAX_SEED = 2**64 - 1


def check_sampling(max_new_tokens: int, temperature: float, top_k: int, seed: int = 0) -> None:
    """The sampling options, before the checkpoint is read: counts >= 0, a temperature of 0 or a finite one
    >= :data:`MIN_TEMPERATURE`, a seed torch can take."""
    if max_new_tokens < 0:
        raise UsageError(f"--max_new_tokens must be >= 0, got {max_new_tokens}")
    if not (temperature == 0 or MIN_TEMPERATURE <= temperature < float("inf")):
        raise UsageError(
            f"--temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g}, got {temperature}"
        )
    if top_k < 0:
        raise UsageError(f"--top_k must be >= 0 (0 = sample among all ids), got {top_k}")
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be between 0 and 2**64 - 1, got {seed}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="andrea generate", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )  # --help shows them
    parser.add_argument("--ckpt", required=True, help="path of a checkpoint written by `andrea fit`")
    parser.add_argument("--prompt", default="", help="text to continue (empty: start from end-of-text)")
    parser.add_argument("--max_new_tokens", type=int, default=200, help="tokens to sample")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    parser.add_argument("--top_k", type=int, default=50, help="sample among the k most likely (0 = all)")
    parser.add_argument("--seed", type=int, default=1337, help="seeds the sampling")
    parser.add_argument("--device", default="auto", help="where to run; auto: cuda if this build sees a GPU, else cpu")
    args = parser.parse_args(argv)
    check_sampling(args.max_new_tokens, args.temperature, args.top_k, args.seed)
    # torch and Lightning (~5 s in all) after the arguments: `--help` and a bad value answer at once
    import torch

    # both import Lightning
    from andrea_lab.fit.module import AndreaLM
    from andrea_lab.runs.checkpoint_io import load_checkpoint

    auto = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = checked_device(auto if args.device == "auto" else args.device)

    checkpoint = load_checkpoint(args.ckpt)
    tokenizer = tokenizer_from_checkpoint(checkpoint, args.ckpt)
    model = AndreaLM.from_checkpoint(checkpoint, args.ckpt).model.to(args.device).eval()

    eot = (checkpoint.get("AndreaDataModule") or {}).get("eot_id", tokenizer.get_vocab_size() - 1)
    ids = tokenizer.encode(args.prompt).ids if args.prompt else [eot]
    vocab = model.config.vocab_size
    if any(not 0 <= i < vocab for i in ids):
        raise UsageError(
            f"{args.ckpt}: its tokenizer gives ids up to {max(ids)}, beyond the model's vocabulary of {vocab} ids "
            "(the stored tokenizer does not belong to these weights)"
        )
    if len(ids) > model.config.block_size:
        raise UsageError(
            f"the prompt is {len(ids)} tokens, longer than the model's context "
            f"(block_size {model.config.block_size}); shorten it to at most "
            f"{model.config.block_size} tokens"
        )
    generator = torch.Generator(device=args.device).manual_seed(args.seed)
    idx = torch.tensor([ids], dtype=torch.long, device=args.device)
    out = model.generate(
        idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k or None, generator=generator
    )
    print(tokenizer.decode(out[0].tolist(), skip_special_tokens=False))
    return 0
