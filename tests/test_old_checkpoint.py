"""A checkpoint written by `andrea fit` before AndreaLM's training arguments became a dataclass
(tests/data/old_checkpoint/, made by its make_fixture.py at commit f345e43) still loads through every
path that reads one: the module itself, ``--ckpt_path`` resume, generate, trace, lens, export and
``model.init_from``. Its value is that the old code wrote it: never regenerate it with newer code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from andrea_lab.cli import main
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import AndreaConfig
from andrea_lab.runs.checkpoint_io import load_checkpoint, stored_hyperparameters, stored_model_config

FIXTURE = Path(__file__).resolve().parent / "data" / "old_checkpoint"
CKPT = FIXTURE / "andrea-lm-2026-12-02.ckpt"


def _fit_args() -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE / "make_fixture.py")
    made = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(made)
    return list(made.FIT_ARGS)


@pytest.fixture
def in_fixture_dir(tmp_path, monkeypatch):
    """A working directory holding the fixture's corpus (its run names it and its cache relatively)."""
    shutil.copy(FIXTURE / "corpus.txt", tmp_path / "corpus.txt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_fixture_is_small_and_verified():
    assert CKPT.stat().st_size < 300_000
    checkpoint = load_checkpoint(CKPT)  # the sha256 manifest beside it is checked
    assert checkpoint["global_step"] == 4 and "rng_states" in checkpoint and checkpoint["skipped_steps"] == 0


def test_the_module_rebuilds_from_it_with_its_arguments_and_weights():
    checkpoint = load_checkpoint(CKPT)
    module = AndreaLM.from_checkpoint(checkpoint, str(CKPT))
    assert module.config.d_model == 16 and module.config.n_layer == 1
    assert (module.args.lr, module.args.z_loss, module.args.on_nonfinite) == (3e-3, 1e-4, "skip")
    assert module.nonfinite.skips
    stored, now = stored_hyperparameters(checkpoint), dict(module.hparams)
    stored_config, now_config = dict(stored.pop("config")), dict(now.pop("config"))
    assert {key: now[key] for key in stored} == stored  # saved the same way as then
    # Model fields added since (tie_embeddings, embedding_scale, cpu_attention_fp32) take the defaults the old run's
    # architecture and arithmetic had.
    assert {key: now_config[key] for key in stored_config} == stored_config
    added = {key: value for key, value in now_config.items() if key not in stored_config}
    assert added == {key: getattr(AndreaConfig(), key) for key in added} and set(added) <= {
        "tie_embeddings",
        "embedding_scale",
        "cpu_attention_fp32",
    }
    # Arguments added since take the defaults the old run trained with (AdamW, warmup-cosine, no options, betas).
    assert {key: now[key] for key in now if key not in stored} == {
        "optimizer": "adamw",
        "optimizer_args": {},
        "schedule": None,
        "schedule_args": {},
        "beta2": None,
    }
    state = module.state_dict()
    assert all(torch.equal(state[key], value) for key, value in checkpoint["state_dict"].items())
    module.on_load_checkpoint(checkpoint)  # the architecture check and the RNG states
    assert stored_model_config(checkpoint)["d_model"] == 16


def test_generate_and_trace_read_it(capsys):
    assert (
        main(["generate", "--ckpt", str(CKPT), "--prompt", "the", "--max_new_tokens", "5", "--temperature", "0"]) == 0
    )
    assert capsys.readouterr().out.startswith("the")
    assert main(["trace", "--ckpt", str(CKPT), "--text", "the model", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 2  # one block: attn, mlp


def test_lens_reads_it(in_fixture_dir, capsys):
    assert (
        main(
            [
                "lens",
                "--ckpt",
                str(CKPT),
                "--json",
                "--max_tokens",
                "64",
                "--out",
                str(in_fixture_dir / "lens.json"),
                "--no-tensorboard",
            ]
        )
        == 0
    )
    assert (in_fixture_dir / "lens.json").is_file()


def test_export_reads_it(tmp_path):
    pytest.importorskip("transformers")
    assert main(["export", "--ckpt", str(CKPT), "--to", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_a_fit_resumes_it_with_ckpt_path(in_fixture_dir):
    assert main(["fit", *_fit_args(), "--trainer.max_steps", "6", "--ckpt_path", str(CKPT)]) == 0
    last = load_checkpoint(next(in_fixture_dir.glob("runs/quickstart/version_*/checkpoints/last.ckpt")))
    assert last["global_step"] == 6
    # Today's code writes the hyperparameters as the old code did (same keys, order and types), followed by the
    # arguments added since (the optimizer and schedule plugins, beta2), at the defaults the old run trained with.
    # In the model's config, fields added since (tie_embeddings, embedding_scale, cpu_attention_fp32) are written
    # at the old architecture's and arithmetic's values.
    old = load_checkpoint(CKPT)["hyper_parameters"]
    written = list(last["hyper_parameters"].items())
    config = dict(last["hyper_parameters"]["config"])
    added = {key: config.pop(key) for key in set(config) - set(old["config"])}
    assert added == {"tie_embeddings": True, "embedding_scale": 1.0, "cpu_attention_fp32": False}
    written = [(key, config if key == "config" else value) for key, value in written]
    assert written[: len(old)] == list(old.items()) and isinstance(old["betas"], tuple)
    assert dict(written[len(old) :]) == {
        "optimizer": "adamw",
        "schedule": None,
        "optimizer_args": {},
        "schedule_args": {},
        "beta2": None,
    }


def test_a_fit_started_from_it_with_init_from_resumes_without_reading_init_from_again(in_fixture_dir):
    # The resumed fit's weights come from --ckpt_path; init_from (here deleted after the first fit) is not read.
    start = in_fixture_dir / "start.ckpt"
    shutil.copy(CKPT, start)
    shutil.copy(f"{CKPT}.sha256.json", f"{start}.sha256.json")
    args = [*_fit_args(), "--model.init_from", str(start)]
    assert main(["fit", *args, "--trainer.max_steps", "2"]) == 0
    run = in_fixture_dir / "runs" / "quickstart" / "version_0"
    start.unlink()
    assert (
        main(
            [
                "fit",
                *args,
                "--trainer.max_steps",
                "4",
                "--ckpt_path",
                str(run / "checkpoints" / "last.ckpt"),
                "--trainer.logger.init_args.version",
                "0",
            ]
        )
        == 0
    )
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 4
    assert f"init_from: {start}" in (run / "config.yaml").read_text()  # the record still names where it started
