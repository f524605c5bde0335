"""`andrea trace` on a real micro checkpoint: a table, JSON, a plot, and clear errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import lightning as L
import pytest
from andrea_testing import tiny_trainer

from andrea_lab.commands import trace as trace_command
from andrea_lab.data import AndreaDataModule
from andrea_lab.fit.module import AndreaLM
from andrea_lab.model.config import preset


def fitted_checkpoint(root, text_corpus, **config):
    """A checkpoint written by a 3-step fit of the micro model (byte tokenizer, so it carries a tokenizer)."""
    L.seed_everything(3, verbose=False)
    module = AndreaLM(config=preset("andrea-micro", block_size=32, **config), lr=3e-3, warmup_steps=1)
    data = AndreaDataModule(
        corpus=str(text_corpus),
        tokenizer="byte",
        vocab_size=257,
        block_size=32,
        batch_size=4,
        cache_dir=str(root / "cache"),
    )
    trainer = tiny_trainer(max_steps=3, limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=data)
    path = root / "micro.ckpt"
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def micro_checkpoint(tmp_path_factory, text_corpus):
    return fitted_checkpoint(tmp_path_factory.mktemp("trace-ckpt"), text_corpus)


@pytest.fixture(scope="module")
def capped_checkpoint(tmp_path_factory, text_corpus):
    """The same fit with final_logit_softcap 0.1: small enough that the cap bites on the micro model's logits."""
    return fitted_checkpoint(tmp_path_factory.mktemp("trace-capped"), text_corpus, final_logit_softcap=0.1)


def test_json_has_one_row_per_sublayer_with_finite_numbers(micro_checkpoint, capsys, tmp_path):
    png = tmp_path / "trace.png"
    assert (
        trace_command.main(["--ckpt", str(micro_checkpoint), "--text", "def main(argv):", "--json", "--plot", str(png)])
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert [(r["block"], r["sublayer"]) for r in payload["rows"]] == [(0, "attn"), (0, "mlp"), (1, "attn"), (1, "mlp")]
    for row in payload["rows"]:
        for key in ("stream_norm", "delta_norm", "cosine", "ratio"):
            assert math.isfinite(row[key]), key
    assert payload["position"] == len("def main(argv):") - 1 and payload["token"] == ":"
    assert payload["norm_placement"] == "andrea-lab:pre" and payload["plot"] == str(png)
    assert png.stat().st_size > 1000


def test_table_output_and_position(micro_checkpoint, capsys):
    assert trace_command.main(["--ckpt", str(micro_checkpoint), "--text", "hello world", "--position", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("token 'h' (id 104) at position 0 of 11")
    rows = [line for line in out.splitlines() if line.strip().startswith(("0  ", "1  "))]
    assert len(rows) == 4


def test_bad_position_is_one_message(micro_checkpoint, capsys):
    assert trace_command.main(["--ckpt", str(micro_checkpoint), "--text", "abc", "--position", "3"]) == 2
    assert "position 3 is outside the text's 3 tokens" in capsys.readouterr().err


def test_missing_checkpoint_through_the_andrea_command(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", "trace", "--ckpt", str(tmp_path / "no.ckpt"), "--text", "x"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "no.ckpt" in result.stderr and "Traceback" not in result.stderr


def test_json_carries_the_lens_and_the_attribution(micro_checkpoint, capsys, tmp_path):
    png = tmp_path / "t.png"
    assert (
        trace_command.main(
            [
                "--ckpt",
                str(micro_checkpoint),
                "--text",
                "hello world",
                "--position",
                "4",
                "--json",
                "--top_k",
                "3",
                "--plot",
                str(png),
                "--lens-plot",
                str(tmp_path / "t_lens.png"),
                "--attribution-plot",
                str(tmp_path / "t_attribution.png"),
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    lens = payload["lens"]
    assert [row["label"] for row in lens["rows"]] == ["embed", "0.attn", "0.mlp", "1.attn", "1.mlp"]
    assert all(len(row["top"]) == 3 and row["next_rank"] >= 1 for row in lens["rows"])
    assert payload["actual_next_token"] == " " and lens["rows"][-1]["top"][0]["token"] == payload["next_token"]
    assert "final norm" in lens["decoded_through"]
    assert len(lens["grid"]["top_tokens"]) == 5 and len(lens["grid"]["top_tokens"][0]) == len("hello world")
    attribution = payload["attribution"]
    assert attribution["target"] == payload["next_token"]
    assert attribution["sum"] == pytest.approx(attribution["logit"], abs=1e-4)
    assert payload["plots"] == [str(png), str(tmp_path / "t_lens.png"), str(tmp_path / "t_attribution.png")]
    assert all((tmp_path / name).stat().st_size > 1000 for name in ("t_lens.png", "t_attribution.png"))


def test_a_given_target_and_the_tables(micro_checkpoint, capsys):
    assert trace_command.main(["--ckpt", str(micro_checkpoint), "--text", "hello world", "--target", "q"]) == 0
    out = capsys.readouterr().out
    assert "logit lens: the stream after each sublayer, decoded through the final norm" in out
    assert "no actual next token" in out and "direct logit attribution to 'q'" in out
    assert "final norm bias" in out and "model logit" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--position", "11"], "position 11 is outside the text's 11 tokens"),
        (["--target", "ab"], "--target 'ab' is not one token: it encodes to 2"),
        (["--top_k", "0"], "--top_k must be a positive number"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(micro_checkpoint, capsys, argv, message):
    assert trace_command.main(["--ckpt", str(micro_checkpoint), "--text", "hello world", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_with_a_final_soft_cap_trace_attributes_the_pre_cap_logit_and_reports_the_capped_output(
    capped_checkpoint, capsys
):
    assert (
        trace_command.main(
            ["--ckpt", str(capped_checkpoint), "--text", "hello world", "--position", "4", "--json", "--top_k", "3"]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["final_logit_softcap"] == 0.1
    attribution = payload["attribution"]
    assert attribution["softcap"] == 0.1 and attribution["attributed"].startswith("the pre-cap logit z")
    assert attribution["sum"] == pytest.approx(attribution["logit"], abs=1e-4)  # linear before the cap
    assert attribution["output_logit"] == pytest.approx(0.1 * math.tanh(attribution["logit"] / 0.1), abs=1e-6)
    assert abs(attribution["output_logit"]) < 0.1 < abs(attribution["logit"])  # the cap bites here
    # The lens's last row is the model's own (capped) output: its top-1 probability is trace's prediction's.
    last = payload["lens"]["rows"][-1]
    assert last["top"][0]["token"] == payload["next_token"]
    assert last["top"][0]["prob"] == pytest.approx(payload["next_token_prob"], rel=1e-6)
    assert attribution["output_prob"] == pytest.approx(payload["next_token_prob"], rel=1e-6)
    assert "final soft cap 0.1" in payload["lens"]["decoded_through"]
    assert trace_command.main(["--ckpt", str(capped_checkpoint), "--text", "hello world", "--position", "4"]) == 0
    out = capsys.readouterr().out
    assert "of the pre-cap logit z (final_logit_softcap 0.1" in out
    assert "pre-cap logit" in out and "capped (output)" in out and "model logit" not in out
