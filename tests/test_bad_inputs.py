"""The bad-input catalogue: each case is one line. Every one must end in a single clear message that
names the offending value, a non-zero exit status, and no Python traceback.

A case is (id, arguments after `andrea`, fragments the error output must contain). Arguments may use
{tmp}, {corpus}, {quickstart}, and the files built by `bad_files` below.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning
import numpy as np
import pytest
import torch

from andrea_lab import preset
from andrea_lab.checkpoint_io import AtomicCheckpointIO
from andrea_lab.cli import main
from andrea_lab.data import byte_tokenizer, write_token_file
from andrea_lab.module import AndreaLM
from andrea_testing import MICRO_OVERRIDES

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")
FIT = ["fit", "--config", "{quickstart}", "--trainer.max_steps", "1",
       "--trainer.logger.init_args.save_dir", "{tmp}/runs"]
MICRO_FIT = [*FIT, *MICRO_OVERRIDES]

CASES = [
    ("malformed-yaml", ["fit", "--config", "{tmp}/broken.yaml"], ["broken.yaml"]),
    ("unknown-key", [*FIT, "--model.config.dmodel", "64"], ["dmodel"]),
    ("wrong-type", [*FIT, "--model.config.d_model", "wide"], ["d_model", "wide"]),
    ("zero-size", [*FIT, "--model.config.n_layer", "0"], ["n_layer must be a positive integer, got 0"]),
    ("negative-size", [*FIT, "--data.batch_size", "-4"], ["batch_size", "-4"]),
    ("heads-do-not-divide", [*FIT, "--model.config.n_head", "5"], ["d_model (128) must be divisible by n_head (5)"]),
    ("unknown-plugin", [*FIT, "--model.config.activation", "mish"], ["unknown activation 'mish'", "gelu", "relu", "swiglu"]),
    ("negative-lr", [*FIT, "--model.lr", "-1"], ["lr must be a finite number > 0, got -1"]),
    ("missing-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/nowhere.txt"], ["nowhere.txt", "does not exist"]),
    ("empty-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/empty"], ["empty"]),
    ("binary-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/image.png"], ["image.png", "binary"]),
    ("token-file-bad-magic", [*MICRO_FIT, "--data.corpus", "{tmp}/bad_magic.bin"], ["bad_magic.bin", "20240520"]),
    ("token-file-bad-version", [*MICRO_FIT, "--data.corpus", "{tmp}/bad_version.bin"], ["bad_version.bin", "version"]),
    ("token-file-truncated", [*MICRO_FIT, "--data.corpus", "{tmp}/truncated.bin"], ["truncated.bin"]),
    ("token-id-beyond-vocab", [*MICRO_FIT, "--data.corpus", "{tmp}/big_ids.bin", "--data.tokenizer", "bpe"],
     ["300", "257"]),
    ("byte-tokenizer-vocab", [*FIT, "--data.tokenizer", "byte"], ["257", "8449"]),
    ("missing-checkpoint", [*MICRO_FIT, "--data.corpus", "{corpus}", "--ckpt_path", "{tmp}/none.ckpt"], ["none.ckpt"]),
    ("missing-config", ["fit", "--config", "{tmp}/nope.yaml"], ["nope.yaml", "does not exist"]),
    ("generate-prompt-beyond-context", ["generate", "--ckpt", "{tmp}/micro.ckpt", "--prompt", "x" * 100],
     ["100 tokens", "block_size 64"]),
    ("damaged-checkpoint", [*MICRO_FIT, "--data.corpus", "{corpus}", "--ckpt_path", "{tmp}/damaged.ckpt"],
     ["damaged.ckpt", "is damaged"]),
    ("generate-missing-checkpoint", ["generate", "--ckpt", "{tmp}/none.ckpt"], ["none.ckpt", "does not exist"]),
    ("params-missing-config", ["params", "--config", "{tmp}/nope.yaml"], ["nope.yaml"]),
    ("trace-position-out-of-range", ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "abc", "--position", "3"],
     ["position 3 is outside the text's 3 tokens"]),
    ("trace-target-not-a-token", ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "abc", "--target", "xyz"],
     ["--target 'xyz' is not one token"]),
    ("trace-checkpoint-without-tokenizer", ["trace", "--ckpt", "{tmp}/no-tokenizer.ckpt", "--text", "abc"],
     ["no-tokenizer.ckpt carries no tokenizer"]),
    ("lens-checkpoint-without-data", ["lens", "--ckpt", "{tmp}/micro.ckpt"], ["micro.ckpt records no data module"]),
]


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "broken.yaml").write_text("model:\n  config: [unclosed\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    header = np.zeros(256, dtype="<i4")
    header[:3] = (12345, 1, 10)
    (tmp_path / "bad_magic.bin").write_bytes(header.tobytes() + bytes(20))
    header[:3] = (20240520, 7, 10)
    (tmp_path / "bad_version.bin").write_bytes(header.tobytes() + bytes(20))
    header[:3] = (20240520, 1, 1000)
    (tmp_path / "truncated.bin").write_bytes(header.tobytes() + bytes(20))
    write_token_file(tmp_path / "big_ids.bin", np.full(5000, 300, dtype=np.uint16))
    save_checkpoint(tmp_path / "micro.ckpt", d_model=64)
    save_checkpoint(tmp_path / "no-tokenizer.ckpt", d_model=64, tokenizer=False)
    AtomicCheckpointIO().save_checkpoint(torch.load(tmp_path / "micro.ckpt", weights_only=False), tmp_path / "damaged.ckpt")
    with open(tmp_path / "damaged.ckpt", "r+b") as file:
        file.truncate(1000)  # a write cut short
    return tmp_path


def save_checkpoint(path: Path, d_model: int, tokenizer: bool = True) -> None:
    """A minimal Lightning-format checkpoint of a micro model, with its tokenizer (unless ``tokenizer`` is false)."""
    module = AndreaLM(config=preset("andrea-micro", d_model=d_model))
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                "pytorch-lightning_version": lightning.__version__, "epoch": 0, "global_step": 0,
                "loops": {}, "optimizer_states": [], "lr_schedulers": [],
                "AndreaDataModule": {"tokenizer_json": byte_tokenizer().to_str() if tokenizer else None}}, path)


@pytest.mark.parametrize("case_id,argv,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_clear_message(case_id, argv, fragments, bad_files, text_corpus, capsys):
    args = [a.format(tmp=bad_files, corpus=text_corpus, quickstart=QUICKSTART) for a in argv]
    try:
        status = main(args)
    except SystemExit as exit_:  # argument parsers exit; that is fine as long as it is an error exit
        status = exit_.code
    out = capsys.readouterr()
    output = out.err + out.out
    assert status not in (0, None), f"{case_id} was accepted"
    assert "Traceback" not in output
    for fragment in fragments:
        assert fragment in output, f"{case_id}: {fragment!r} not in:\n{output}"
    record = os.environ.get("ANDREA_LAB_RECORD_MESSAGES")  # regenerates the table in docs/reliability.md
    if record:
        message = next(line for line in output.splitlines() if "error" in line or "diverged" in line)
        with open(record, "a", encoding="utf-8") as file:
            file.write(f"| {case_id} | {status} | `{message.replace(str(bad_files), '…').replace('|', '/')}` |\n")
