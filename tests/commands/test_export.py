"""`andrea export --to hf` on a trained checkpoint: transformers computes the same logits and the same
greedy continuation as `andrea generate --temperature 0`; refusals exit 2 with one message."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from andrea_lab.cli import main
from andrea_lab.fit.module import AndreaLM
from andrea_lab.runs.checkpoint_io import load_checkpoint

PROMPT = "the quick"


@pytest.fixture(scope="module")
def exported(trained_micro_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "micro-hf"
    assert (
        main(
            ["export", "--ckpt", str(trained_micro_run / "checkpoints" / "last.ckpt"), "--to", "hf", "--out", str(out)]
        )
        == 0
    )
    return out


@pytest.mark.slow
def test_transformers_computes_the_checkpoints_logits(trained_micro_run, exported):
    checkpoint = load_checkpoint(trained_micro_run / "checkpoints" / "last.ckpt")
    module = AndreaLM(**checkpoint["hyper_parameters"])
    module.load_state_dict(checkpoint["state_dict"])
    model = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True).eval()
    ids = torch.randint(0, 257, (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (module.model.eval()(ids)[0] - model(ids).logits).abs().max()
    assert difference <= 1e-5


@pytest.mark.slow
def test_greedy_generate_gives_the_tokens_of_andrea_generate(trained_micro_run, exported, capsys):
    assert (
        main(
            [
                "generate",
                "--ckpt",
                str(trained_micro_run / "checkpoints" / "last.ckpt"),
                "--prompt",
                PROMPT,
                "--temperature",
                "0",
                "--max_new_tokens",
                "40",
            ]
        )
        == 0
    )
    ours = capsys.readouterr().out.removesuffix("\n")
    tokenizer = AutoTokenizer.from_pretrained(exported, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True).eval()
    prompt = tokenizer(PROMPT, return_tensors="pt")
    theirs = model.generate(**prompt, max_new_tokens=40, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert tokenizer(ours)["input_ids"] == theirs[0].tolist()
    assert len(set(theirs[0, len(PROMPT) :].tolist())) > 2  # a continuation, not one repeated token
    generated = pipeline("text-generation", model=model, tokenizer=tokenizer)(
        PROMPT, max_new_tokens=40, do_sample=False
    )
    assert generated[0]["generated_text"] == ours


@pytest.mark.slow
def test_the_model_card_has_the_runs_numbers(trained_micro_run, exported):
    card = (exported / "README.md").read_text()
    assert "| optimizer steps | 40 |" in card and "| tokens seen | 20,480 |" in card  # 40 steps x 8 x 64
    assert "(in-training validation at step 40)" in card and "end-of-fit evaluation) | not recorded" not in card


@pytest.mark.slow
def test_a_post_norm_run_is_refused_with_exit_status_2(trained_micro_run, tmp_path, capsys):
    checkpoint = load_checkpoint(trained_micro_run / "checkpoints" / "last.ckpt")
    checkpoint["hyper_parameters"]["config"].update(norm_placement="post", bias=False)
    torch.save(checkpoint, tmp_path / "post.ckpt")
    assert main(["export", "--ckpt", str(tmp_path / "post.ckpt"), "--to", "hf", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "norm_placement 'post'" in err and "bias False" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
