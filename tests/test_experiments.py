"""Every YAML under experiments/ resolves and takes an optimizer step on the CPU at tiny size: the fit
configs (the GPU flagship with its own precision, clipping and accumulation), the scale-out configs on top
of it, and every variant of every sweep suite. A config that only a GPU run would exercise is still run
here, so that a crash at step 1 (bf16-mixed + clipping + the fused AdamW did that) is found in CI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from andrea_testing import tiny_trainer

from andrea_lab.cli import main as cli_main
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.search_runs import SearchRuns
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.fit.module import AndreaLM
from andrea_lab.fit.nonfinite import global_grad_norm
from andrea_lab.fit.optim import adamw_with_schedule
from andrea_lab.model.config import preset

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
FLAGSHIP = EXPERIMENTS / "andrea-120m.yaml"


def shipped(folder: Path, pattern: str) -> list[Path]:
    """The project's own YAMLs under ``folder``: in a git checkout the tracked ones (a user's own suite or
    config beside them is theirs to test, and must not make the test command fail), else every match."""
    matches = sorted(folder.glob(pattern))
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--full-name", "."], cwd=folder, capture_output=True, check=True, timeout=60
        ).stdout
        root = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, check=True, text=True, timeout=60
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout (an unpacked sdist)
        return matches
    tracked = {(Path(root) / name).resolve() for name in listed.decode().split("\0") if name}
    return [path for path in matches if path.resolve() in tracked] if tracked else matches


FIT_CONFIGS = shipped(EXPERIMENTS, "*.yaml")
SCALE_CONFIGS = shipped(EXPERIMENTS / "scale", "*.yaml")
SUITES = shipped(EXPERIMENTS / "suites", "**/*.yaml")


def test_only_the_projects_own_yamls_are_stepped_not_a_users_beside_them(tmp_path):
    suites = tmp_path / "experiments" / "suites"
    suites.mkdir(parents=True)
    (suites / "shipped.yaml").write_text("name: shipped\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (suites / "mine.yaml").write_text("name: mine\n")  # a user's own, not part of the project
    assert shipped(suites, "**/*.yaml") == [suites / "shipped.yaml"]
    assert shipped(tmp_path / "nowhere", "*.yaml") == []


#: What makes any of them one CPU step of a micro model; everything else (precision, clipping,
#: accumulation, strategy, the variant's overrides) stays as the YAML says.
TINY = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "1",
    "--trainer.num_nodes",
    "1",
    "--trainer.max_steps",
    "1",
    "--trainer.limit_val_batches",
    "1",
    "--trainer.num_sanity_val_steps",
    "0",
    "--trainer.val_check_interval",
    "1",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--trainer.enable_model_summary",
    "false",
    "--model.config.vocab_size",
    "257",
    "--data.tokenizer",
    "byte",
    "--model.config.d_model",
    "32",
    "--model.config.n_layer",
    "2",
    "--model.config.n_head",
    "2",
    "--model.config.block_size",
    "32",
    "--data.batch_size",
    "2",
    "--data.num_workers",
    "0",
    "--heldout.max_tokens",
    "1024",
    "--checkpoint.save_top_k",
    "0",
    "--checkpoint.save_last",
    "false",
    "--model.warmup_steps",
    "0",
]


def one_step(tmp_path: Path, corpus: Path, *args: str) -> dict:
    """Run ``andrea fit ARGS + TINY`` in ``tmp_path``; the run's summary.json."""
    save_dir = tmp_path / "runs"
    code = cli_main(
        ["fit", *args, *TINY, "--data.corpus", str(corpus), "--trainer.logger.init_args.save_dir", str(save_dir)]
    )
    assert code == 0
    (summary,) = save_dir.rglob("summary.json")
    record = json.loads(summary.read_text())
    assert record["steps"] == 1 and record["status"] == "finished", record
    return record


@pytest.mark.parametrize("config", FIT_CONFIGS, ids=lambda p: p.name)
def test_every_fit_config_takes_a_step_on_the_cpu(config, tmp_path, text_corpus):
    one_step(tmp_path, text_corpus, "--config", str(config))


#: Lightning's FSDPStrategy refuses a CPU accelerator: on the CPU its config is resolved and its strategy
#: built (auto-wrap policy imported), and the GPU check (benchmarks/gpu_check.py) trains with it.
GPU_ONLY = {"fsdp.yaml"}


@pytest.mark.parametrize("config", [p for p in SCALE_CONFIGS if p.name not in GPU_ONLY], ids=lambda p: p.name)
def test_every_scale_config_takes_a_step_on_top_of_the_flagship(config, tmp_path, text_corpus):
    one_step(tmp_path, text_corpus, "--config", str(FLAGSHIP), "--config", str(config))


@pytest.mark.parametrize("config", [p for p in SCALE_CONFIGS if p.name in GPU_ONLY], ids=lambda p: p.name)
def test_a_gpu_only_scale_config_resolves_and_builds_its_strategy(config, capsys):
    import yaml
    from jsonargparse import ArgumentParser
    from lightning.pytorch.strategies import Strategy

    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(FLAGSHIP), "--config", str(config), "--print_config"])
    assert exit_.value.code in (0, None)
    strategy = yaml.safe_load(capsys.readouterr().out)["trainer"]["strategy"]
    parser = ArgumentParser()
    parser.add_argument("--strategy", type=Strategy)
    built = parser.instantiate_classes(parser.parse_object({"strategy": strategy})).strategy
    assert type(built).__name__ == strategy["class_path"].rsplit(".", 1)[-1]


def test_the_flagship_trains_with_its_own_precision_clipping_and_accumulation(tmp_path, text_corpus):
    record = one_step(tmp_path, text_corpus, "--config", str(FLAGSHIP))
    assert record["training"]["lr"] == 6e-4
    assert record["tokens_seen"] == 4 * 2 * 32, "accumulate_grad_batches: 4 micro-batches per optimizer step"


def test_clipping_with_the_fused_adamw_and_no_scaler_clips_to_the_norm():
    module = AndreaLM(config=preset("andrea-micro", block_size=16))
    optimizer, _ = adamw_with_schedule(module.model, 1e-3, (0.9, 0.95), 1e-8, 0.1, 0, 10, 0.1, fused=True)
    assert getattr(optimizer, "_step_supports_amp_scaling", False), "this torch has a fused AdamW on the CPU"
    x = torch.randint(0, 257, (2, 16))
    _, loss = module.model(x, x)
    (loss * 1000).backward()
    module.nonfinite.last_grad_norm = global_grad_norm(module.parameters())
    assert module.nonfinite.last_grad_norm > 1.0
    module.trainer = tiny_trainer(precision="bf16-mixed")  # bf16-mixed: no GradScaler
    module.configure_gradient_clipping(optimizer, 1.0, "norm")
    assert float(global_grad_norm(module.parameters())) == pytest.approx(1.0, rel=1e-4)


def suite_variant_commands(suite_files: list[Path]) -> list[tuple[str, list[str]]]:
    """One fit command per distinct set of a variant's overrides across all suites (``pre`` of the CPU and
    the GPU norm_placement suites is one; each suite's base is a fit config, stepped above)."""
    seen, commands = set(), []
    for suite_file in suite_files:
        suite = load_suite(suite_file)
        # One scale of a scale axis: TINY overrides the widths that tell the scales apart.
        first_scale = [suite.scales[0].name] if suite.scales else None
        specs = plan_sweep(suite, "unused", lrs=suite.lrs[:1], seeds=suite.seeds[:1], scales=first_scale)
        if suite.searches:  # a search's runs carry its tuned keys at their base values (sweep.search_runs)
            specs = SearchRuns(suite, "unused", specs).initial(specs)
        for spec in specs:
            key = json.dumps(spec.overrides, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                at_scale = f"{spec.scale}/" if spec.scale is not None else ""
                commands.append(
                    (
                        f"{suite_file.parent.name}/{suite_file.stem}:{at_scale}{spec.variant}",
                        list(spec.command[spec.command.index("fit") + 1 :]),
                    )
                )
    return commands


SUITE_VARIANTS = suite_variant_commands(SUITES)


@pytest.mark.slow
@pytest.mark.parametrize("label, command", SUITE_VARIANTS, ids=[label for label, _ in SUITE_VARIANTS])
def test_every_suite_variant_takes_a_step_on_the_cpu(label, command, tmp_path, text_corpus):
    one_step(tmp_path, text_corpus, *command)  # TINY's save_dir comes later, so it wins
