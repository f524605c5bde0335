"""Hostile inputs (issue 41): a handed config, suite, checkpoint or run record may not run code, write outside
its own fresh run directory, write through a link, overwrite a user's file, or end in a traceback or a hang.
Each test performs one attack and checks that it is refused with one line (exit status 2) and left no trace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml
from andrea_testing import QUICKSTART, micro_fit, refused

from andrea_lab.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the marker file is the mark of code that ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def payload_checkpoint(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1e-3}, "payload": Payload(marker)}, path)
    return path


# --- 1. a handed config or suite cannot unpickle ----------------------------------------------------------

#: Each spelling of "load this checkpoint the unsafe way" a config file can hold; DIR holds the payload.
UNPICKLE_SPELLINGS = {
    "hpc-plugins-null": {"ckpt_path": "hpc", "weights_only": False, "trainer": {"plugins": None}},
    "hpc-torch-io": {
        "ckpt_path": "hpc",
        "trainer": {"plugins": [{"class_path": "lightning.pytorch.plugins.io.TorchCheckpointIO"}]},
    },
    "last-plugins-null": {"ckpt_path": "last", "trainer": {"plugins": None}},
    "hpc-weights-only-alone": {"ckpt_path": "hpc", "weights_only": False},
    "path-weights-only-false": {"ckpt_path": "DIR/last.ckpt", "weights_only": False},
    "strategy-checkpoint-io": {
        "ckpt_path": "hpc",
        "trainer": {
            "plugins": None,
            "strategy": {
                "class_path": "lightning.pytorch.strategies.SingleDeviceStrategy",
                "init_args": {
                    "device": "cpu",
                    "checkpoint_io": {"class_path": "lightning.pytorch.plugins.io.TorchCheckpointIO"},
                },
            },
        },
    },
}


def unpickle_attack(spelling: str, tmp_path: Path) -> tuple[dict, Path]:
    """The config of ``spelling`` pointing at a directory that holds the payload as every name Lightning
    looks for (``hpc_ckpt_1.ckpt``, ``last.ckpt``); returns it and the marker the payload would create."""
    marker = tmp_path / "PAYLOAD_RAN"
    where = tmp_path / "victim"
    for name in ("hpc_ckpt_1.ckpt", "last.ckpt"):
        payload_checkpoint(where / name, marker)
    config = yaml.safe_load(yaml.safe_dump(UNPICKLE_SPELLINGS[spelling]).replace("DIR", str(where)))
    config.setdefault("trainer", {})["default_root_dir"] = str(where)
    config["checkpoint"] = {"dirpath": str(where)} if config["ckpt_path"] == "last" else {}
    return config, marker


@pytest.mark.parametrize("spelling", sorted(UNPICKLE_SPELLINGS))
def test_hostile_config_cannot_unpickle_through_fit(spelling, tmp_path, text_corpus, monkeypatch, capsys):
    config, marker = unpickle_attack(spelling, tmp_path)
    (tmp_path / "attack.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--config", str(tmp_path / "attack.yaml")))
    assert not marker.exists(), f"{spelling}: the checkpoint's code ran"
    print(refused(capsys, code))


def suite_with_common(tmp_path: Path, corpus: Path, common: dict) -> Path:
    """A one-run suite of the tiny CPU base whose ``common:`` holds ``common``."""
    from andrea_lab.experiments.sweep.tiny_suite import MICRO

    base = Path(QUICKSTART).with_name("cpu-base.yaml")
    suite = {
        "name": "attack",
        "base": str(base),
        "common": {**MICRO, "trainer.max_steps": 1, "data.corpus": str(corpus), **common},
        "lrs": [1e-3],
        "seeds": [0],
        "variants": [{"name": "only", "overrides": {}}],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def dotted(config: dict, prefix: str = "") -> dict:
    """``{"trainer": {"plugins": None}}`` -> ``{"trainer.plugins": None}`` (a suite's override keys)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and key != "init_args" and "class_path" not in value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize("spelling", sorted(UNPICKLE_SPELLINGS))
def test_hostile_suite_common_cannot_unpickle_through_sweep(spelling, tmp_path, text_corpus, monkeypatch, capsys):
    config, marker = unpickle_attack(spelling, tmp_path)
    suite = suite_with_common(tmp_path, text_corpus, dotted(config))
    monkeypatch.chdir(tmp_path)
    code = cli_main(["sweep", str(suite), "--runs-dir", str(tmp_path / "runs")])
    assert not marker.exists(), f"{spelling}: the checkpoint's code ran"
    refused(capsys, code, "is set by the sweep")


# --- 2. a run writes only inside its own fresh run directory ----------------------------------------------


def victim_run(root: Path) -> Path:
    """A directory holding another run: its record, config and a checkpoint manifest."""
    run = root / "runs" / "theirs" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "finished"}')
    (run / "config.yaml").write_text("theirs: true\n")
    (run / "checkpoints" / "last.ckpt.sha256.json").write_text('{"bytes": 1, "sha256": "theirs"}')
    return run


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "attack",
    [
        ["--checkpoint.dirpath", "{victim}/checkpoints"],
        ["--trainer.logger", "false", "--trainer.default_root_dir", "{victim}"],
    ],
    ids=["checkpoint-dirpath", "logger-false-default-root-dir"],
)
def test_hostile_fit_never_writes_into_another_run(attack, tmp_path, text_corpus, monkeypatch, capsys):
    victim = victim_run(tmp_path)
    before = tree(victim)
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, *[arg.replace("{victim}", str(victim)) for arg in attack]))
    refused(capsys, code, str(victim))
    assert tree(victim) == before


@pytest.mark.parametrize(
    "attack",
    [
        ["--checkpoint.filename", "../../../../outside/evil{step}"],
        ["--trainer.logger.init_args.sub_dir", "../../../../outside/subd"],
        ["--preemption.filename", "../../outside/preempted"],
        ["--checkpoint.filename", "/tmp/outside-evil{step}"],
    ],
    ids=["checkpoint-filename", "logger-sub-dir", "preemption-filename", "absolute-filename"],
)
def test_hostile_names_never_climb_out_of_the_run(attack, tmp_path, text_corpus, monkeypatch, capsys):
    work = tmp_path / "a" / "b" / "c" / "d"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    code = cli_main(micro_fit(text_corpus, *attack))
    refused(capsys, code, attack[1])
    assert not list(tmp_path.rglob("outside*")) and not Path("/tmp/outside-evil1.ckpt").exists()


#: Writers a config can add beside the run's own (the red team of 2026-12-04): each must stay in the run.
EXTRA_WRITERS = {
    "callback-checkpoint-filename": (
        [
            "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            "--trainer.callbacks.filename",
            "../../../../outside/evil",
            "--trainer.callbacks.every_n_train_steps",
            "1",
        ],
        "would leave the run directory",
    ),
    "on-exception-dirpath": (
        [
            "--trainer.callbacks+=lightning.pytorch.callbacks.OnExceptionCheckpoint",
            "--trainer.callbacks.dirpath",
            "{outside}",
        ],
        "OnExceptionCheckpoint writes to",
    ),
    "profiler-dirpath": (
        [
            "--trainer.profiler",
            "lightning.pytorch.profilers.SimpleProfiler",
            "--trainer.profiler.dirpath",
            "{outside}",
            "--trainer.profiler.filename",
            "notes",
        ],
        "SimpleProfiler writes to",
    ),
    "preemption-filename-in-a-field": (
        ["--preemption.filename", "{/../../../../../../outside}"],
        "preemption.filename",
    ),
}


@pytest.mark.parametrize("attack", sorted(EXTRA_WRITERS))
def test_hostile_extra_writers_stay_in_the_run(attack, tmp_path, text_corpus, monkeypatch, capsys):
    argv, named = EXTRA_WRITERS[attack]
    work, outside = tmp_path / "a" / "b" / "c" / "d", tmp_path / "outside"
    work.mkdir(parents=True)
    outside.mkdir()
    (outside / "notes.txt").write_text("the user's notes\n")
    monkeypatch.chdir(work)
    code = cli_main(micro_fit(text_corpus, *[arg.replace("{outside}", str(outside)) for arg in argv]))
    refused(capsys, code, named)
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]
    assert (outside / "notes.txt").read_text() == "the user's notes\n"
    assert not (work / "runs").exists() or not any((work / "runs").rglob("*.ckpt"))


def test_hostile_second_logger_never_writes_into_a_users_directory(tmp_path, text_corpus, monkeypatch, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "metrics.csv").write_text("the user's metrics\n")
    config = tmp_path / "two.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "logger": [
                        {
                            "class_path": "andrea_lab.fit.loggers.AndreaTensorBoardLogger",
                            "init_args": {"save_dir": "runs", "name": "quickstart", "default_hp_metric": False},
                        },
                        {
                            "class_path": "lightning.pytorch.loggers.CSVLogger",
                            "init_args": {"save_dir": str(victim), "name": "", "version": ""},
                        },
                    ]
                }
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--config", str(config)))
    refused(capsys, code, "CSVLogger writes to")
    assert sorted(p.name for p in victim.iterdir()) == ["metrics.csv"]
    assert (victim / "metrics.csv").read_text() == "the user's metrics\n"


def test_hostile_linked_experiment_directory_is_not_written_through(tmp_path, text_corpus, monkeypatch, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "quickstart").symlink_to(elsewhere)
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus))
    refused(capsys, code, "is a symbolic link")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("value", ["hpc", "best", ""])
def test_hostile_searched_checkpoints_are_refused_in_one_line(value, tmp_path, text_corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--ckpt_path", value))
    refused(capsys, code, f"ckpt_path {value!r} is refused")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--checkpoint.every_n_train_steps", "-1"], "every_n_train_steps"),
        (["--checkpoint.save_top_k", "-5"], "save_top_k"),
        (["--checkpoint.mode", "maximum"], "mode"),
        (["--stability.stuck_after", "-1"], "stuck_after"),
    ],
    ids=["every-n-train-steps", "save-top-k", "mode", "stuck-after"],
)
def test_hostile_callback_arguments_end_in_one_line(argv, named, tmp_path, text_corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, *argv))
    refused(capsys, code, "invalid argument", named)


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, text_corpus) -> Path:
    """A working directory holding ``runs/quickstart/version_0``: a one-step micro fit."""
    root = tmp_path_factory.mktemp("one-step")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert cli_main(micro_fit(text_corpus)) == 0
    return root


@pytest.fixture
def run_copy(one_step_run, tmp_path, monkeypatch) -> Path:
    """A copy of :func:`one_step_run`'s run directory, in a fresh working directory."""
    import shutil

    shutil.copytree(one_step_run, tmp_path / "work", symlinks=True)
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "work" / "runs" / "quickstart" / "version_0"


def test_hostile_resume_stays_in_its_run_whatever_its_config_says(run_copy, tmp_path, capsys):
    config = run_copy / "config.yaml"
    elsewhere = tmp_path / "elsewhere"
    config.write_text(config.read_text().replace("save_dir: runs", f"save_dir: {elsewhere}"))
    code = cli_main(["fit", "--resume", str(run_copy), "--trainer.max_steps", "2"])
    refused(capsys, code, "--resume", str(run_copy))
    assert not elsewhere.exists()


def test_hostile_resume_never_tokenizes_into_a_cache_its_config_names(run_copy, tmp_path, capsys):
    config = run_copy / "config.yaml"
    theirs = tmp_path / "theircache"
    assert "  cache_dir: null" in config.read_text()
    config.write_text(config.read_text().replace("  cache_dir: null", f"  cache_dir: {theirs}"))
    code = cli_main(["fit", "--resume", str(run_copy), "--trainer.max_steps", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"its config.yaml names data.cache_dir {theirs}" in err and "your own cache" in err
    assert not theirs.exists()


def test_hostile_sweep_lock_that_is_a_link_is_not_written_through(tmp_path, text_corpus, monkeypatch, capsys):
    suite = suite_with_common(tmp_path, text_corpus, {})
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes")
    (tmp_path / "runs" / "attack").mkdir(parents=True)
    (tmp_path / "runs" / "attack" / ".sweep.lock").symlink_to(notes)
    monkeypatch.chdir(tmp_path)
    code = cli_main(["sweep", str(suite), "--runs-dir", "runs", "--no-check"])
    refused(capsys, code, ".sweep.lock", "symbolic link")
    assert notes.read_text() == "the user's notes"


@pytest.mark.parametrize("linked", ["variant", "suite"])
def test_hostile_sweep_never_writes_runs_through_a_linked_directory(linked, tmp_path, text_corpus, monkeypatch, capsys):
    suite = suite_with_common(tmp_path, text_corpus, {})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if linked == "variant":
        (tmp_path / "runs" / "attack").mkdir(parents=True)
        (tmp_path / "runs" / "attack" / "only").symlink_to(elsewhere)
    else:
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "attack").symlink_to(elsewhere)
    monkeypatch.chdir(tmp_path)
    code = cli_main(["sweep", str(suite), "--runs-dir", "runs", "--no-check"])
    refused(capsys, code, "symbolic link")
    assert not any(elsewhere.iterdir())


def test_hostile_sweep_run_directory_outside_the_suite_is_refused(tmp_path):
    from andrea_lab.errors import UsageError
    from andrea_lab.files import refuse_links_below

    with pytest.raises(UsageError, match="is not inside"):
        refuse_links_below(tmp_path / "runs" / "suite", tmp_path / "runs" / "suite" / ".." / ".." / "out", "run")


# --- 2 and 3. compare writes only into a directory of its own, never through a link ----------------------

RUNS_CSV = Path(__file__).resolve().parent / "experiments/compare/data/runs-2026-11-29/norm_placement.csv"


def compare(out: Path, source: Path = RUNS_CSV) -> int:
    return cli_main(["compare", str(source), "--out", str(out), "--no-tensorboard"])


def test_hostile_compare_never_overwrites_a_directory_it_did_not_make(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "runs.csv").write_text("the user's own runs.csv")
    refused(capsys, compare(out), str(out), "did not write")
    assert [p.name for p in out.iterdir()] == ["runs.csv"]
    assert (out / "runs.csv").read_text() == "the user's own runs.csv"
    assert compare(tmp_path / "fresh") == 0 and compare(tmp_path / "fresh") == 0  # its own: rewritten


@pytest.mark.parametrize("linked", ["out", "comparison.md"])
def test_hostile_compare_never_writes_through_a_link(linked, tmp_path, capsys):
    (tmp_path / "notes.md").write_text("the user's notes")
    out = tmp_path / "report"
    if linked == "out":
        (tmp_path / "target").mkdir()
        out.symlink_to(tmp_path / "target")
    else:
        assert compare(out) == 0
        capsys.readouterr()
        (out / "comparison.md").unlink()
        (out / "comparison.md").symlink_to(tmp_path / "notes.md")
    refused(capsys, compare(out), "symbolic link")
    assert (tmp_path / "notes.md").read_text() == "the user's notes"
    assert linked != "out" or not any((tmp_path / "target").iterdir())


@pytest.mark.parametrize("name", ["/tmp/hostile-abs-suite", "../../climbed"])
def test_hostile_compare_recorded_suite_name_is_one_name(name, tmp_path, capsys):
    source = tmp_path / "runs.csv"
    source.write_text(RUNS_CSV.read_text().replace("norm_placement,", f"{name},"))
    refused(capsys, compare(tmp_path / "out", source), repr(name))
    assert not Path("/tmp/hostile-abs-suite").exists() and not (tmp_path.parent / "climbed").exists()


def test_hostile_compare_on_a_table_of_thousands_of_seeds_finishes_with_its_report(tmp_path, capsys):
    """The committed A/A runs copied under 150 new seeds per run (7,200 rows, 1,200 seed sets per variant):
    the A/A calibration asked for C(2400, 1200) / 2 splits (compare never finished; 1,200 rows took more than
    10 minutes), the leave-one-seed-out choices dropped each seed's column in turn, and the sign-flip floor
    2 / 2^n overflowed a float (a traceback). Now the report is written, naming what it sampled."""
    import csv

    rows = list(csv.DictReader((REPO / "docs/results/aa/runs.csv").open()))
    source = tmp_path / "runs.csv"
    with source.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for copy in range(150):
            for row in rows:
                writer.writerow({**row, "seed": int(row["seed"]) + 10_000 * copy, "path": f"{row['path']}-{copy}"})
    suite = str(REPO / "experiments/suites/aa.yaml")
    assert cli_main(["compare", str(source), "--suite", suite, "--out", str(tmp_path / "out"), "--no-tensorboard"]) == 0
    report = (tmp_path / "out" / "comparison.md").read_text()
    assert (
        "(one configuration; the first 100 of each variant's, 2200 more left out)" in report
        and "20000 splits drawn, seeded" in report
    )


# --- 3. trace writes only the files named, never over an existing one --------------------------------------


def test_hostile_trace_plot_refuses_an_existing_file_and_writes_only_what_is_named(one_step_run, tmp_path, capsys):
    ckpt = one_step_run / "runs/quickstart/version_0/checkpoints/last.ckpt"
    png = tmp_path / "existing.png"
    png.write_bytes(b"the user's picture")
    code = cli_main(["trace", "--ckpt", str(ckpt), "--text", "def f", "--plot", str(png)])
    refused(capsys, code, str(png), "--overwrite")
    assert png.read_bytes() == b"the user's picture" and sorted(p.name for p in tmp_path.iterdir()) == [png.name]
    assert cli_main(["trace", "--ckpt", str(ckpt), "--text", "def f", "--plot", str(png), "--overwrite"]) == 0
    assert png.read_bytes() != b"the user's picture" and sorted(p.name for p in tmp_path.iterdir()) == [png.name]


# --- 5. every file a fit rewrites is replaced whole ---------------------------------------------------------


def test_hostile_resume_never_leaves_config_yaml_truncated(run_copy, monkeypatch):
    """A failure while the resumed fit writes its config.yaml (here: the dump raises) leaves the old file."""
    import inspect

    import jsonargparse

    config = run_copy / "config.yaml"
    before = config.read_bytes()
    real_dump = jsonargparse.ArgumentParser.dump

    def failing_dump(self, cfg, *args, **kwargs):
        if any(frame.function == "save" for frame in inspect.stack(0)):  # the parser saving config.yaml
            raise RuntimeError("injected failure while writing config.yaml")
        return real_dump(self, cfg, *args, **kwargs)

    monkeypatch.setattr(jsonargparse.ArgumentParser, "dump", failing_dump)
    with pytest.raises(RuntimeError, match="injected"):
        cli_main(["fit", "--resume", str(run_copy), "--trainer.max_steps", "2"])
    assert config.read_bytes() == before


#: How long a command handed a FIFO may take before the test calls it a hang. A hang waits forever, so this only has
#: to outlast a slow start: andrea fit took over 60 s to start and refuse in a fresh-clone CI run niced beside a
#: two-job sweep (2026-12-07), and about 10 s quiet. Not a speed limit (those live in benchmarks/).
HANG_SECONDS = 600


@pytest.mark.parametrize("where", ["command-line", "config-file"])
def test_hostile_fifo_as_a_config_value_is_refused_not_waited_on(where, tmp_path, text_corpus):
    import subprocess
    import sys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    extra = ["--data", str(fifo)]
    if where == "config-file":
        (tmp_path / "attack.yaml").write_text(yaml.safe_dump({"data": str(fifo)}))
        extra = ["--config", str(tmp_path / "attack.yaml")]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "andrea_lab.cli", *micro_fit(text_corpus, *extra)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("andrea fit waited on the FIFO")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "not a regular file" in result.stderr and str(fifo) in result.stderr


# --- 4. paths stored in a checkpoint are data -------------------------------------------------------------


def test_hostile_lens_never_tokenizes_into_a_cache_the_checkpoint_names(one_step_run, tmp_path, capsys):
    checkpoint = torch.load(one_step_run / "runs/quickstart/version_0/checkpoints/last.ckpt", weights_only=True)
    elsewhere = tmp_path / "their-cache"
    checkpoint["datamodule_hyper_parameters"]["cache_dir"] = str(elsewhere)
    handed = tmp_path / "handed" / "model.ckpt"
    handed.parent.mkdir()
    torch.save(checkpoint, handed)
    code = cli_main(["lens", "--ckpt", str(handed), "--out", str(tmp_path / "lens.json"), "--max_tokens", "256"])
    assert code == 0, capsys.readouterr().err
    assert not elsewhere.exists()
    assert f"not using the cache directory the checkpoint names ({elsewhere})" in capsys.readouterr().err


# --- 5. handed checkpoints and arguments end in one line, nothing allocated for a config's say-so ------------


def _edited_checkpoint(run: Path, tmp_path: Path, edit) -> Path:
    """A copy of the one-step run's last.ckpt with ``edit(checkpoint)`` applied, saved as plain tensors."""
    from andrea_lab.runs.checkpoint_io import load_checkpoint

    checkpoint = load_checkpoint(run / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt")
    edit(checkpoint)
    path = tmp_path / "edited.ckpt"
    torch.save(checkpoint, path)
    return path


def _config(checkpoint: dict) -> dict:
    return checkpoint["hyper_parameters"]["config"]


HOSTILE_CHECKPOINTS = {
    # a 300 KB file whose config asks for a 40-billion-parameter model: refused before anything is allocated
    "huge-config": (lambda c: _config(c).update(d_model=8192, n_layer=48, n_head=64), "do not fit"),
    "more-layers-than-weights": (lambda c: _config(c).update(n_layer=_config(c)["n_layer"] + 1), "missing"),
    "mismatched-shape": (
        lambda c: c["state_dict"].update({"model.lm_head.weight": torch.zeros(3, 3)}),
        "model.lm_head.weight",
    ),
    "nan-weights": (
        lambda c: next(v for k, v in c["state_dict"].items() if k.endswith("weight")).fill_(float("nan")),
        "NaN or infinite",
    ),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE_CHECKPOINTS))
def test_hostile_checkpoint_ends_generate_in_one_line(attack, one_step_run, tmp_path, capsys):
    edit, named = HOSTILE_CHECKPOINTS[attack]
    path = _edited_checkpoint(one_step_run, tmp_path, edit)
    refused(capsys, cli_main(["generate", "--ckpt", str(path), "--max_new_tokens", "2"]), named)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--temperature", "1e-45"], "--temperature must be 0 (greedy) or a finite number >= 0.001"),
        (["--seed", str(10**24)], "--seed must be between 0 and 2**64 - 1"),
    ],
)
def test_hostile_sampling_arguments_end_in_one_line(argv, named, one_step_run, capsys):
    ckpt = one_step_run / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    refused(capsys, cli_main(["generate", "--ckpt", str(ckpt), "--max_new_tokens", "2", *argv]), named)


def test_hostile_tokenizer_ids_beyond_the_vocabulary_end_in_one_line(one_step_run, tmp_path, capsys):
    from andrea_lab.data.tokenizer import train_bpe_tokenizer

    bigger = train_bpe_tokenizer(["def f(x):\n    return x\n" * 50], 270)  # 270 ids for a 257-id model

    def swap_tokenizer(checkpoint):
        for state in checkpoint.values():
            if isinstance(state, dict) and "tokenizer_json" in state:
                state["tokenizer_json"] = bigger.to_str()

    path = _edited_checkpoint(one_step_run, tmp_path, swap_tokenizer)
    refused(
        capsys,
        cli_main(["generate", "--ckpt", str(path), "--prompt", "def f(x): return", "--max_new_tokens", "1"]),
        "beyond the model's vocabulary of 257",
    )


def test_hostile_tokenizer_that_fails_on_text_is_refused_when_loaded():
    """The Rust library's panic (pyo3's PanicException is a BaseException) is turned into one line at load."""
    from andrea_lab.data.tokenizer import TokenizerError, probed

    class PanicException(BaseException):
        pass

    class Panicking:
        def encode(self, text):
            raise PanicException("regex automaton exploded")

        def decode(self, ids):
            return ""

    with pytest.raises(TokenizerError, match="the tokenizer JSON fails on ordinary text .PanicException"):
        probed(Panicking(), "the tokenizer JSON")


def test_hostile_fifo_as_an_event_file_is_refused_by_compare_not_waited_on(one_step_run, tmp_path):
    import shutil
    import subprocess
    import sys

    runs = tmp_path / "runs"
    shutil.copytree(one_step_run / "runs", runs, symlinks=True)
    os.mkfifo(runs / "quickstart" / "version_0" / "events.out.tfevents.0.fifo")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "andrea_lab.cli", "compare", str(runs / "quickstart"), "--no-tensorboard"],
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("andrea compare waited on the FIFO")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "events.out.tfevents.0.fifo is not a regular file" in result.stderr


def test_hostile_full_disk_in_a_writer_without_its_own_handling_exits_5_in_one_line(
    one_step_run, tmp_path, monkeypatch, capsys
):
    """A plot (or an event file, an export) that meets ENOSPC: exit 5, one line naming the file, no traceback;
    what was already written is complete (those files are replaced atomically)."""
    import errno as errno_module

    from matplotlib.figure import Figure

    def full(self, path, *args, **kwargs):
        raise OSError(errno_module.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Figure, "savefig", full)
    out = tmp_path / "out"
    runs = one_step_run / "runs" / "quickstart"
    assert cli_main(["compare", str(runs), "--out", str(out), "--no-tensorboard"]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the disk is full (No space left on device) while writing" in err
    assert "loss_curves.png" in err and "Traceback" not in err


MALFORMED_STATES = {
    "monitor-not-a-mapping": ("StabilityMonitor", None, "stability monitor's state"),
    "monitor-grad-norms": ("StabilityMonitor", {"grad_norms": ["a"]}, "stability monitor's state"),
    "monitor-count": ("StabilityMonitor", {"nonfinite_steps": "many"}, "stability monitor's state"),
    "gave-way": ("StabilityMonitor", {"gave_way": [1, 2]}, "gave-way state"),
    "summary-history": ("RunSummary", {"val_history": "zz"}, "run summary's state"),
    "summary-initial-loss": ("RunSummary", {"initial_val_loss": {"a": 1}}, "run summary's state"),
    "heldout-curve": ("HeldOutEvaluation", {"curve": 5}, "held-out evaluation's state"),
    "all-callbacks": (None, None, "callbacks' states in the checkpoint: the mapping"),
}


@pytest.mark.parametrize("attack", sorted(MALFORMED_STATES))
def test_hostile_malformed_callback_state_ends_a_resumed_fit_in_one_line(
    attack, one_step_run, tmp_path, text_corpus, monkeypatch, capsys
):
    key, patch, named = MALFORMED_STATES[attack]

    def edit(checkpoint):
        if key is None:
            checkpoint["callbacks"] = ["garbage"]
        elif patch is None:
            checkpoint["callbacks"][key] = "garbage"
        else:
            checkpoint["callbacks"][key].update(patch)

    path = _edited_checkpoint(one_step_run, tmp_path, edit)
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--ckpt_path", str(path), "--trainer.max_steps", "2"))
    refused(capsys, code, named, "is malformed")
    # Refused before anything is written: no run directory is left for a fit that never started.
    assert not (tmp_path / "runs").exists(), sorted(str(p) for p in (tmp_path / "runs").rglob("*"))


def test_hostile_absurd_batch_is_refused_before_anything_is_allocated(tmp_path, text_corpus, monkeypatch, capsys):
    """With memory overcommitted, a step that cannot fit is met by the OOM killer, without a word: refused first."""
    monkeypatch.chdir(tmp_path)
    code = cli_main(micro_fit(text_corpus, "--data.batch_size", "1000000000"))
    refused(capsys, code, "32,000,000,000 tokens needs at least", "lower data.batch_size")
    assert not (tmp_path / "runs").exists()
