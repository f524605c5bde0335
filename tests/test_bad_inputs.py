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
from andrea_testing import MICRO_OVERRIDES

from andrea_lab import preset
from andrea_lab.cli import main
from andrea_lab.data import byte_tokenizer, write_token_file
from andrea_lab.fit.module import AndreaLM
from andrea_lab.runs.checkpoint_io import AtomicCheckpointIO

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")
FIT = [
    "fit",
    "--config",
    "{quickstart}",
    "--trainer.max_steps",
    "1",
    "--trainer.logger.init_args.save_dir",
    "{tmp}/runs",
]
MICRO_FIT = [*FIT, *MICRO_OVERRIDES]

CASES = [
    ("malformed-yaml", ["fit", "--config", "{tmp}/broken.yaml"], ["broken.yaml"]),
    ("unknown-key", [*FIT, "--model.config.dmodel", "64"], ["dmodel"]),
    ("wrong-type", [*FIT, "--model.config.d_model", "wide"], ["d_model", "wide"]),
    ("zero-size", [*FIT, "--model.config.n_layer", "0"], ["n_layer must be a positive integer, got 0"]),
    ("negative-size", [*FIT, "--data.batch_size", "-4"], ["batch_size", "-4"]),
    ("heads-do-not-divide", [*FIT, "--model.config.n_head", "5"], ["d_model (128) must be divisible by n_head (5)"]),
    (
        "unknown-plugin",
        [*FIT, "--model.config.activation", "mish"],
        ["unknown activation 'mish'", "gelu", "relu", "swiglu"],
    ),
    ("unknown-norm", [*FIT, "--model.config.norm", "batchnorm"], ["unknown norm 'batchnorm'", "layernorm", "rmsnorm"]),
    (
        "unknown-optimizer",
        [*FIT, "--model.optimizer", "adam"],
        ["unknown optimizer 'adam'", "did you mean 'adamw'", "lion", "muon", "schedule_free"],
    ),
    (
        "unknown-schedule",
        [*FIT, "--model.schedule", "cosine"],
        ["unknown schedule 'cosine'", "did you mean 'warmup_cosine'", "constant", "linear", "wsd"],
    ),
    (
        "schedule-free-decaying",
        [*FIT, "--model.optimizer", "schedule_free", "--model.schedule", "warmup_cosine"],
        ["'schedule_free' takes only a constant schedule", "got schedule 'warmup_cosine'", "model.schedule: constant"],
    ),
    (
        "optimizer-args-unknown-key",
        [*FIT, "--model.optimizer", "muon", "--model.optimizer_args", "{{momentun: 0.9}}"],
        ["model.optimizer_args", "'momentun'", "its options: momentum, nesterov, ns_steps"],
    ),
    ("qk-norm-maybe", [*FIT, "--model.config.qk_norm", "maybe"], ["qk_norm", "maybe"]),
    ("negative-lr", [*FIT, "--model.lr", "-1"], ["lr must be a finite number > 0, got -1"]),
    ("heldout-seed-negative", [*FIT, "--heldout.seed", "-1"], ["heldout.seed must be an integer from 0 to 4294967295"]),
    ("heldout-memory-zero", [*FIT, "--heldout.memory_mib", "0"], ["heldout.memory_mib must be a positive", "got 0"]),
    (
        "data-seed-huge",
        [*FIT, "--data.seed", str(2**80)],
        ["seed must be an integer from 0 to 4294967295, got 1208925819614629174706176"],
    ),
    (
        "attn-softcap-negative",
        [*FIT, "--model.config.attn_logit_softcap", "-1"],
        ["attn_logit_softcap must be a finite number > 0", "null for no cap, got -1"],
    ),
    # YAML's NaN (.nan) reaches AndreaLM's check; a bare `nan` is a string, which the parser refuses by name.
    ("z-loss-nan", [*FIT, "--model.z_loss", ".nan"], ["z_loss must be a finite number >= 0", "got nan"]),
    ("z-loss-not-a-number", [*FIT, "--model.z_loss", "nan"], ["model.z_loss", "float", "nan"]),
    ("missing-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/nowhere.txt"], ["nowhere.txt", "does not exist"]),
    ("empty-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/empty"], ["empty"]),
    ("binary-corpus", [*MICRO_FIT, "--data.corpus", "{tmp}/image.png"], ["image.png", "binary"]),
    ("token-file-bad-magic", [*MICRO_FIT, "--data.corpus", "{tmp}/bad_magic.bin"], ["bad_magic.bin", "20240520"]),
    ("token-file-bad-version", [*MICRO_FIT, "--data.corpus", "{tmp}/bad_version.bin"], ["bad_version.bin", "version"]),
    ("token-file-truncated", [*MICRO_FIT, "--data.corpus", "{tmp}/truncated.bin"], ["truncated.bin"]),
    (
        "token-id-beyond-vocab",
        [*MICRO_FIT, "--data.corpus", "{tmp}/big_ids.bin", "--data.tokenizer", "bpe"],
        ["300", "257"],
    ),
    ("byte-tokenizer-vocab", [*FIT, "--data.tokenizer", "byte"], ["257", "8449"]),
    ("missing-checkpoint", [*MICRO_FIT, "--data.corpus", "{corpus}", "--ckpt_path", "{tmp}/none.ckpt"], ["none.ckpt"]),
    ("missing-config", ["fit", "--config", "{tmp}/nope.yaml"], ["nope.yaml", "does not exist"]),
    (
        "generate-prompt-beyond-context",
        ["generate", "--ckpt", "{tmp}/micro.ckpt", "--prompt", "x" * 100],
        ["100 tokens", "block_size 64"],
    ),
    (
        "damaged-checkpoint",
        [*MICRO_FIT, "--data.corpus", "{corpus}", "--ckpt_path", "{tmp}/damaged.ckpt"],
        ["damaged.ckpt", "is damaged"],
    ),
    ("generate-missing-checkpoint", ["generate", "--ckpt", "{tmp}/none.ckpt"], ["none.ckpt", "does not exist"]),
    ("params-missing-config", ["params", "--config", "{tmp}/nope.yaml"], ["nope.yaml"]),
    (
        "trace-position-out-of-range",
        ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "abc", "--position", "3"],
        ["position 3 is outside the text's 3 tokens"],
    ),
    (
        "trace-target-not-a-token",
        ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "abc", "--target", "xyz"],
        ["--target 'xyz' is not one token"],
    ),
    (
        "trace-checkpoint-without-tokenizer",
        ["trace", "--ckpt", "{tmp}/no-tokenizer.ckpt", "--text", "abc"],
        ["no-tokenizer.ckpt carries no tokenizer"],
    ),
    ("lens-checkpoint-without-data", ["lens", "--ckpt", "{tmp}/micro.ckpt"], ["micro.ckpt records no data module"]),
    # Handed files past the bounds (docs/reliability.md): alias bombs, files that are not files.
    ("config-alias-bomb", ["fit", "--config", "{tmp}/bomb.yaml", "--print_config"], ["bomb.yaml", "aliases"]),
    (
        "model-config-alias-bomb",
        [*FIT, "--model.config", "{tmp}/bomb_model.yaml", "--print_config"],
        ["bomb_model.yaml", "aliases"],
    ),
    ("params-config-alias-bomb", ["params", "--config", "{tmp}/bomb.yaml"], ["bomb.yaml", "aliases"]),
    ("config-recursive-alias", ["fit", "--config", "{tmp}/recursive.yaml"], ["recursive.yaml", "recursive"]),
    ("config-fifo", ["fit", "--config", "{tmp}/fifo.yaml"], ["fifo.yaml", "not a regular file"]),
    ("config-not-utf8", ["fit", "--config", "{tmp}/latin1.yaml"], ["latin1.yaml", "not UTF-8"]),
    (
        "tokenize-too-many-workers",
        ["tokenize", "{corpus}", "--out", "{tmp}/tok", "--workers", "1000"],
        ["--workers", "1000", "at most"],
    ),
    (
        "tokenize-tiny-shards",
        ["tokenize", "{corpus}", "--out", "{tmp}/tok", "--shard-tokens", "1"],
        ["--shard-tokens", "at least 1,024"],
    ),
    # Values Lightning takes but crashes on later, or silently misuses.
    ("accumulate-zero", [*FIT, "--trainer.accumulate_grad_batches", "0"], ["accumulate_grad_batches", "got 0"]),
    ("val-check-interval-zero", [*FIT, "--trainer.val_check_interval", "0"], ["val_check_interval", "got 0"]),
    ("seed-negative", [*FIT, "--seed_everything", "-1"], ["seed_everything", "got -1"]),
    ("gradient-clip-negative", [*FIT, "--trainer.gradient_clip_val", "-1"], ["gradient_clip_val", "got -1"]),
    ("corpus-empty-string", [*FIT, "--data.corpus", ""], ["corpus must name the data, got ''"]),
    ("validate-without-checkpoint", ["validate", "--config", "{quickstart}"], ["--ckpt_path", "random weights"]),
    (
        "logger-name-escapes",
        [*FIT, "--trainer.logger.init_args.name", "../../elsewhere"],
        ["'../../elsewhere' would leave save_dir"],
    ),
    ("logger-version-escapes", [*FIT, "--trainer.logger.init_args.version", "a/../../b"], ["'a/../../b'"]),
    (
        "model-too-large-for-memory",
        [*MICRO_FIT, "--data.corpus", "{corpus}", "--model.config.d_model", "262144", "--model.config.n_head", "1"],
        ["out of memory", "d_model"],
    ),
    (
        "generate-temperature-nan",
        ["generate", "--ckpt", "{tmp}/micro.ckpt", "--temperature", "nan"],
        ["--temperature", "nan"],
    ),
    ("generate-top-k-negative", ["generate", "--ckpt", "{tmp}/micro.ckpt", "--top_k", "-1"], ["--top_k", "-1"]),
    (
        "generate-unknown-device",
        ["generate", "--ckpt", "{tmp}/micro.ckpt", "--device", "cuda:99"],
        ["'cuda:99'", "available: cpu"],
    ),
    ("generate-bad-device-name", ["generate", "--ckpt", "{tmp}/micro.ckpt", "--device", "tpu9"], ["'tpu9'"]),
    (
        "trace-unknown-plot-format",
        ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "x", "--plot", "{tmp}/t.xyz"],
        [".xyz", ".png"],
    ),
    (
        "trace-unknown-device",
        ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "x", "--device", "cuda:99"],
        ["'cuda:99'"],
    ),
    # Output paths that cannot be written, in every command that writes.
    (
        "fit-save-dir-under-a-file",
        [*FIT, "--trainer.logger.init_args.save_dir", "{tmp}/afile/runs"],
        ["save_dir", "afile is a file"],
    ),
    ("compare-out-is-a-file", ["compare", "{tmp}/empty", "--out", "{tmp}/afile"], ["--out", "afile is a file"]),
    ("compare-out-under-a-file", ["compare", "{tmp}/empty", "--out", "{tmp}/afile/x"], ["afile is a file"]),
    (
        "trace-plot-under-a-file",
        ["trace", "--ckpt", "{tmp}/micro.ckpt", "--text", "x", "--plot", "{tmp}/afile/t.png"],
        ["afile is a file"],
    ),
    ("tokenize-out-under-a-file", ["tokenize", "{corpus}", "--out", "{tmp}/afile/tok"], ["afile is a file"]),
    (
        "export-out-under-a-file",
        ["export", "--ckpt", "{tmp}/micro.ckpt", "--to", "hf", "--out", "{tmp}/afile/hf"],
        ["afile is a file"],
    ),
    ("import-out-under-a-file", ["import", "--from-hf", "{tmp}", "--out", "{tmp}/afile/x.ckpt"], ["afile is a file"]),
    ("new-plugin-dir-under-a-file", ["new-plugin", "activation", "foo", "--dir", "{tmp}/afile/p"], ["afile is a file"]),
    (
        "sweep-runs-dir-under-a-file",
        ["sweep", "{tmp}/suite.yaml", "--runs-dir", "{tmp}/afile/runs", "--dry-run"],
        ["--runs-dir", "afile is a file"],
    ),
]


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    """A few hundred bytes of YAML that stand for width**levels values once the aliases are expanded."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


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
    bomb = _alias_bomb()
    (tmp_path / "bomb.yaml").write_text(bomb + "model:\n  config:\n    d_model: 64\n  nothing: *a9\n")
    (tmp_path / "bomb_model.yaml").write_text(bomb + "d_model: 64\nnothing: *a9\n")
    (tmp_path / "recursive.yaml").write_text("model: &m\n  config: *m\n")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "latin1.yaml").write_bytes("model: {lr: 0.001}  # café\n".encode("latin-1"))
    (tmp_path / "afile").write_text("a file, not a directory\n")
    (tmp_path / "suite.yaml").write_text(f"base: {QUICKSTART}\nlrs: [0.001]\nseeds: [0]\nvariants:\n  - name: a\n")
    save_checkpoint(tmp_path / "micro.ckpt", d_model=64)
    save_checkpoint(tmp_path / "no-tokenizer.ckpt", d_model=64, tokenizer=False)
    AtomicCheckpointIO().save_checkpoint(
        torch.load(tmp_path / "micro.ckpt", weights_only=False), tmp_path / "damaged.ckpt"
    )
    with open(tmp_path / "damaged.ckpt", "r+b") as file:
        file.truncate(1000)  # a write cut short
    return tmp_path


def save_checkpoint(path: Path, d_model: int, tokenizer: bool = True) -> None:
    """A minimal Lightning-format checkpoint of a micro model, with its tokenizer (unless ``tokenizer`` is false)."""
    module = AndreaLM(config=preset("andrea-micro", d_model=d_model))
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
            "epoch": 0,
            "global_step": 0,
            "loops": {},
            "optimizer_states": [],
            "lr_schedulers": [],
            "AndreaDataModule": {"tokenizer_json": byte_tokenizer().to_str() if tokenizer else None},
        },
        path,
    )


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


@pytest.mark.parametrize(
    "argv,offending",
    [
        (["--model.optimizer", "adam"], "'adam'"),
        (["--model.schedule", "cosine"], "'cosine'"),
        (["--model.optimizer", "schedule_free", "--model.schedule", "warmup_cosine"], "'warmup_cosine'"),
        (["--model.optimizer", "muon", "--model.optimizer_args", "{{momentun: 0.9}}"], "'momentun'"),
        (["--model.schedule", "wsd", "--model.schedule_args", "{{decay_fraction: 1.5}}"], "1.5"),
        # Each of these ended in a traceback mid-fit (a stub run left behind) or trained as given.
        (["--model.optimizer", "muon", "--model.optimizer_args", "{{momentum: .nan}}"], "momentum = nan"),
        (["--model.optimizer", "muon", "--model.optimizer_args", "{{ns_steps: -1}}"], "ns_steps = -1"),
        (["--model.optimizer", "lion", "--model.optimizer_args", "{{lion_betas: [0.9, 2]}}"], "[0.9, 2]"),
        (["--model.optimizer_args", "{{lr: 0.1}}"], "set by model.lr"),
        (["--model.warmup_steps", "1000000000000000000000"], "1000000000000000000000"),
    ],
    ids=[
        "optimizer",
        "schedule",
        "schedule-free-decaying",
        "optimizer-args",
        "schedule-args",
        "muon-momentum-nan",
        "muon-ns-steps-negative",
        "lion-betas-out-of-range",
        "framework-key-in-optimizer-args",
        "warmup-steps-1e21",
    ],
)
def test_a_bad_optimizer_or_schedule_exits_2_in_one_line_before_any_run_directory(argv, offending, tmp_path, capsys):
    status = main([a.format(tmp=tmp_path, quickstart=QUICKSTART) for a in [*FIT, *argv]])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]  # the other line: ANDREA_LAB_DEBUG's hint
    assert status == 2 and len(errors) == 1 and offending in errors[0] and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


def test_a_checkpoint_whose_embedding_scale_overflows_is_refused_by_generate(tmp_path, capsys):
    """embedding_scale 1e300 is finite, but every logit is inf: generate died in torch.multinomial."""
    save_checkpoint(tmp_path / "micro.ckpt", d_model=64)
    saved = torch.load(tmp_path / "micro.ckpt", weights_only=False)
    saved["hyper_parameters"]["config"]["embedding_scale"] = 1e300
    torch.save(saved, tmp_path / "huge-scale.ckpt")
    status = main(["generate", "--ckpt", str(tmp_path / "huge-scale.ckpt"), "--max_new_tokens", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    assert "embedding_scale must be a number in [0.001, 1000]" in err and "got 1e+300" in err
