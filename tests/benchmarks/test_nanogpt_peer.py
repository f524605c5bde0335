"""The nanoGPT peer (benchmarks/nanogpt_peer.py): our split in nanoGPT's shakespeare_char format and as llm.c
token files with the same ids, its output read, a checkout that is not one refused in one line; end to end with
a stand-in train.py (the real checkout is not part of the tests)."""

from __future__ import annotations

import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.split import split_documents
from andrea_lab.data.token_file import read_token_file
from andrea_lab.data.tokenizer import END_OF_TEXT, load_tokenizer
from benchmarks import nanogpt_peer

NANOGPT_OUTPUT = """found vocab_size = 5 (inside data/andrea_english/meta.pkl)
step 0: train loss 4.1000, val loss 4.2000
iter 0: loss 4.1, time 900.00ms, mfu -100.00%
iter 1: loss 3.9, time 20.00ms, mfu -100.00%
iter 2: loss 3.7, time 25.00ms, mfu -100.00%
iter 3: loss 3.5, time 30.00ms, mfu -100.00%
step 4: train loss 3.3000, val loss 3.4000
iter 4: loss 3.3, time 400.00ms, mfu -100.00%
"""


def test_the_split_is_written_in_nanogpts_format_and_as_token_files_with_the_same_ids(tmp_path):
    train, val = "To be, or not to be.\nÆ", "that is the question\n"
    chars = nanogpt_peer.write_split(tmp_path, train, val)
    assert chars == sorted(set(train + val))
    data = tmp_path / "data" / "andrea_english"
    meta = pickle.loads((data / "meta.pkl").read_bytes())
    assert meta["vocab_size"] == len(chars) and all(meta["stoi"][meta["itos"][i]] == i for i in range(len(chars)))
    for side, text in (("train", train), ("val", val)):
        ids = np.fromfile(data / f"{side}.bin", dtype=np.uint16)
        assert "".join(meta["itos"][int(i)] for i in ids) == text
        assert np.array_equal(np.asarray(read_token_file(tmp_path / f"english_{side}.bin")), ids)
    tokenizer = load_tokenizer(tmp_path / nanogpt_peer.CHAR_TOKENIZER)
    assert tokenizer.encode(train).ids == [meta["stoi"][ch] for ch in train], "ANDREA's tokenizer gives nanoGPT's ids"
    assert tokenizer.token_to_id(END_OF_TEXT) == len(chars) + 1 and tokenizer.get_vocab_size() == len(chars) + 2


def test_the_split_is_andrea_labs_own_each_side_its_documents_in_corpus_order(generated_corpus_dir):
    train_text, val_text, facts = nanogpt_peer.english_split(str(generated_corpus_dir), 0.25)
    corpus = resolve_corpus(str(generated_corpus_dir))
    train, val = split_documents(corpus.relative_names(), 0.25)  # these documents share no lines: no families
    texts = [path.read_text(encoding="utf-8") for path in corpus.files]
    assert train_text == "".join(texts[i] for i in train) and val_text == "".join(texts[i] for i in val)
    assert facts["train_documents"] == len(train) and facts["val_documents"] == len(val) >= 1


def test_nanogpts_last_estimate_and_its_median_step_are_read_from_its_output():
    result = nanogpt_peer.parse_nanogpt(NANOGPT_OUTPUT, 12.0)
    assert result.val_loss == pytest.approx(3.4) and result.steps == 4
    assert result.steps_per_s == pytest.approx(1000 / 27.5), "the median of 20, 25, 30, 400 ms: iter 0 left out"
    with pytest.raises(SystemExit, match="no 'step N"):
        nanogpt_peer.parse_nanogpt("Traceback ...", 1.0)


def test_nanogpt_runs_at_its_readme_cpu_configuration(tmp_path):
    command = nanogpt_peer.nanogpt_command(tmp_path, 2000)
    for flag in ("--device=cpu", "--compile=False", "--n_layer=4", "--n_head=4", "--n_embd=128", "--block_size=64"):
        assert flag in command
    assert "--batch_size=12" in command and "--max_iters=2000" in command and "--lr_decay_iters=2000" in command
    assert "--warmup_iters=100" in command and "--eval_interval=250" in command
    reduced = nanogpt_peer.nanogpt_command(tmp_path, 50)
    assert "--warmup_iters=2" in reduced and "--eval_interval=50" in reduced, "an estimate at the last step"


def test_andrea_trains_the_shape_nanogpt_trains(tmp_path):
    command = nanogpt_peer.andrea_command(tmp_path, 65, 2000)
    for flag in (
        "--model.config.d_model=128",
        "--model.config.n_layer=4",
        "--model.config.n_head=4",
        "--model.config.block_size=64",
        "--model.config.bias=false",
        "--model.config.dropout=0.0",
        "--data.batch_size=12",
        "--model.config.vocab_size=65",
    ):
        assert flag in command


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["{tmp}/empty"], "is not a checkout of karpathy/nanoGPT (no train.py, model.py"),
        (["{checkout}", "--max-iters", "1"], "--max-iters 1: give at least 2"),
        (["{checkout}", "--threads", "0"], "--threads 0: give at least 1"),
        (["{checkout}", "--keep", "{tmp}"], "exists; give a new directory"),
        (["{checkout}", "--corpus", "no-such-corpus-name"], "no-such-corpus-name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, tmp_path, fake_checkout, capsys):
    (tmp_path / "empty").mkdir()
    argv = [arg.format(tmp=tmp_path, checkout=fake_checkout) for arg in argv]
    assert nanogpt_peer.main(argv) == 2
    error = capsys.readouterr().err
    assert words in error and error.count("\n") == 1


@pytest.fixture
def generated_corpus_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "corpus"
    directory.mkdir()
    for index in range(8):
        lines = [f"document {index} line {line} " + "abcdefghij"[index] * (line % 7 + 1) for line in range(40)]
        (directory / f"doc{index}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


@pytest.fixture
def fake_checkout(tmp_path: Path) -> Path:
    """A stand-in for a nanoGPT checkout: its files, and a train.py that reads the data nanoGPT's would (from
    its working directory) and prints nanoGPT's lines, so the orchestration runs without the real one."""
    checkout = tmp_path / "nanoGPT"
    (checkout / "config").mkdir(parents=True)
    for name in ("model.py", "config/train_shakespeare_char.py"):
        (checkout / name).write_text("")
    (checkout / "configurator.py").write_text("import sys\nARGS = sys.argv[2:]\n")
    (checkout / "train.py").write_text(
        "import os, pickle, numpy as np\n"
        "exec(open('configurator.py').read())\n"
        "meta = pickle.load(open(os.path.join('data', 'andrea_english', 'meta.pkl'), 'rb'))\n"
        "val = np.memmap(os.path.join('data', 'andrea_english', 'val.bin'), dtype=np.uint16, mode='r')\n"
        "assert int(val.max()) < meta['vocab_size']\n"
        "print('step 0: train loss 4.0000, val loss 4.1000')\n"
        "for i in range(3): print(f'iter {i}: loss 3.0, time {10 + i}.00ms, mfu -100.00%')\n"
        "print('step 2: train loss 2.5000, val loss 2.6000')\n"
    )
    return checkout


@pytest.mark.slow
def test_one_run_prints_both_trainers_side_by_side(fake_checkout, generated_corpus_dir, tmp_path, capsys):
    keep = tmp_path / "kept"
    argv = [str(fake_checkout), "--corpus", str(generated_corpus_dir), "--val-fraction", "0.25", "--max-iters", "3"]
    assert nanogpt_peer.main([*argv, "--keep", str(keep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("nanoGPT  val loss 2.6000") and lines[-1].startswith("ANDREA   val loss ")
    assert "3 steps" in lines[-1] and not list(fake_checkout.rglob("*.bin")), "nothing written into the checkout"
    assert (keep / "data" / "andrea_english" / "train.bin").is_file()


def test_andrea_runs_under_the_same_environment_as_nanogpt(tmp_path, monkeypatch):
    """``--threads`` reaches both trainers: ANDREA's fit gets the environment nanoGPT gets (once it got
    ``os.environ``, and ran at torch's default threads while nanoGPT ran at one)."""
    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(command, 1, "", "stopped here")

    monkeypatch.setattr(nanogpt_peer.subprocess, "run", fake_run)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with pytest.raises(SystemExit, match="stopped here"):
        nanogpt_peer.run_andrea(tmp_path, 90, 3, {"OMP_NUM_THREADS": "1", "PATH": "/bin"})
    assert seen["OMP_NUM_THREADS"] == "1" and seen["PYTHONPATH"] == str(nanogpt_peer.REPO)
