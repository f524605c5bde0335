"""Every command README.md shows, run in the order a new user meets them, at tiny size: the README cannot
drift from what works.

The commands of the README's ``bash`` blocks that start with ``andrea`` are run as written (a fit gets the
micro model and a small corpus appended: the same keys, later on the line, win). The commands of its
tables and prose, with placeholders (``PATH``, ``RUNS_DIR``...), are run by :data:`PLACEHOLDERS` filled in;
a subcommand the README shows that this file does not run fails the first test.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from andrea_testing import MICRO_OVERRIDES
from packaging.utils import canonicalize_name

from andrea_lab.cli import OWN_COMMANDS, main
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.registry import KINDS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
SUBCOMMAND = re.compile(r"(?:^|[\s`/])andrea ([a-z][a-z-]*)")
TINY_FIT = [
    *MICRO_OVERRIDES,
    "--trainer.max_steps",
    "4",
    "--trainer.val_check_interval",
    "2",
    "--model.warmup_steps",
    "2",
    "--heldout.max_tokens",
    "2048",
]
RUN, OTHER_RUN = "runs/quickstart/version_0", "runs/quickstart/version_1"
CKPT = f"{RUN}/checkpoints/last.ckpt"
#: The README's table commands with their placeholders filled in, in the order they are run (a fit, a
#: sweep's suite and an HF directory first, then what reads them).
PLACEHOLDERS = [
    ["params", "--preset", "andrea-120m"],
    ["generate", "--ckpt", CKPT, "--prompt", "def ", "--max_new_tokens", "5"],
    ["validate", "--config", f"{RUN}/config.yaml", "--ckpt_path", CKPT],
    ["test", "--config", f"{RUN}/config.yaml", "--ckpt_path", CKPT],
    ["plugins"],
    ["new-plugin", "activation", "squared_tanh", "--dir", "andrea-lab-squared_tanh"],
    ["sweep", "suite.yaml", "--no-check"],
    ["fit", "--resume", OTHER_RUN, "--trainer.max_steps", "6"],  # finished after 4: extended by 2
    ["compare", "runs/tiny"],
    ["trace", "--ckpt", CKPT, "--text", "def f"],
    ["lens", "--ckpt", CKPT],
    ["heldout"],  # cpu-base's held-out composition: tokenizes stdlib bytes once (~6 s)
    ["tokenize", "docs.jsonl", "--out", "shards", "--vocab-size", "300", "--workers", "0", "--no-progress"],
    ["export", "--ckpt", CKPT, "--to", "hf", "--out", "hf"],
    ["import", "--from-hf", "hf", "--out", "imported.ckpt"],
]


def code_lines() -> list[str]:
    """The README's ``bash`` blocks, line by line."""
    return [line for block in re.findall(r"```bash\n(.*?)```", README, re.S) for line in block.splitlines()]


def block_lines() -> list[str]:
    """The ``andrea ...`` commands of the ``bash`` blocks, as a user types them (after the set-up's ``&&``)."""
    found = []
    for line in code_lines():
        match = re.search(r"(?:^|&& )(andrea .*)$", line)
        if match:
            found.append(match.group(1))
    return found


def in_the_readmes_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` run by bash in this test's virtual environment activated as the README's set-up leaves it
    (``. .venv/bin/activate``): ``andrea`` and ``tensorboard`` found on PATH, not through ``.venv/bin/``."""
    activate = Path(sys.prefix) / "bin" / "activate"
    prefix = f". {shlex.quote(str(activate))} && " if activate.is_file() else ""
    return subprocess.run(["bash", "-c", prefix + command], cwd=cwd, capture_output=True, text=True, timeout=900)


def next_steps(printed: str) -> list[str]:
    """The commands a fit prints after ``next:`` (one per line, the later ones indented under it)."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next: "))
    return [lines[start].removeprefix("next: ")] + [
        line.strip() for line in lines[start + 1 :] if line.startswith("  ")
    ]


def block_commands() -> list[list[str]]:
    """Each ``andrea`` command of the ``bash`` blocks as argv (the part after ``andrea`` on its line)."""
    found = []
    for line in code_lines():
        match = re.search(r"(?:^|/|&& )andrea (.*)$", line)
        if match:
            found.append(shlex.split(match.group(1)))
    return found


def test_every_subcommand_the_readme_shows_is_run_here():
    shown = set(SUBCOMMAND.findall(README)) & {*OWN_COMMANDS, "fit", "validate", "test"}
    run = {argv[0] for argv in block_commands() + PLACEHOLDERS}
    assert shown <= run, f"README shows `andrea {sorted(shown - run)}`: add it to PLACEHOLDERS"
    assert [argv[:1] for argv in block_commands()] == [["fit"], ["fit"], ["compare"]]


def test_ci_runs_the_readmes_test_command_and_no_set_up_waits_on_an_unreachable_index():
    """pip asks PyTorch's index (requirements-cpu.txt) about every package and retries an unreachable one five
    times with back-off, minutes in all; pip takes ``--retries`` only on its command line, so both set-ups pass it
    there, and ``.ci/run`` runs the README's test command as written."""
    set_ups = [line for line in code_lines() if "pip install" in line]
    assert len(set_ups) == 2, set_ups
    for line in set_ups:
        assert " --retries 1 -r requirements-cpu.txt " in line, line
    assert set_ups[1] in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def parts_table() -> dict[str, list[str]]:
    """The README's parts table: YAML key -> the built-in names its choices cell shows (before a ``;``, after
    which come other packages' plugins)."""
    table = README.split("| part | YAML key | built-in choices |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:-1] for line in table.strip().splitlines()[1:]]
    return {key.strip().strip("`"): re.findall(r"`([a-z_]+)`", choices.split(";")[0]) for _, key, choices in rows}


def test_the_parts_table_lists_every_built_in_plugin():
    """Each plugin kind has a row, under the key a YAML sets (a model.config field, else an AndreaLM argument),
    naming exactly the entry points this distribution registers for it."""
    table = parts_table()
    for kind in KINDS:
        key = f"model.config.{kind}" if kind in AndreaConfig.__dataclass_fields__ else f"model.{kind}"
        registered = {
            entry.name
            for entry in metadata.entry_points(group=f"andrea_lab.{kind}")
            if canonicalize_name(entry.dist.name) == "andrea-lab"
        }
        assert key in table, f"README's parts table has no row for {key} (plugin kind {kind})"
        assert sorted(table[key]) == sorted(registered), (key, table[key], sorted(registered))


def _tiny(argv: list[str], corpus: Path) -> list[str]:
    argv = [str(REPO / arg) if arg.startswith("experiments/") else arg for arg in argv]
    return [*argv, *TINY_FIT, "--data.corpus", str(corpus)] if argv[0] == "fit" else argv


def _suite(corpus: Path) -> dict:
    common = dict(zip(TINY_FIT[::2], TINY_FIT[1::2]))
    common = {key.removeprefix("--"): yaml.safe_load(value) for key, value in common.items()}
    return {
        "name": "tiny",
        "base": str(REPO / "experiments" / "quickstart.yaml"),
        "lrs": [2e-3],
        "seeds": [0],
        "common": {**common, "data.corpus": str(corpus)},
        "variants": [{"name": "pre"}],
    }


@pytest.mark.slow
def test_the_readme_commands_work_in_order(tmp_path, text_corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(_suite(text_corpus)))
    (tmp_path / "docs.jsonl").write_text(
        "".join(json.dumps({"text": f"def f{n}(x):\n    return x + {n}\n"}) + "\n" for n in range(200))
    )
    (tmp_path / "experiments").symlink_to(REPO / "experiments")  # the README's paths, relative to a clone
    tiny = shlex.join([*TINY_FIT, "--data.corpus", str(text_corpus)])
    for line in block_lines():  # the quickstart, the override, the comparison of the two, typed as shown
        done = in_the_readmes_shell(f"{line} {tiny}" if line.startswith("andrea fit") else line, tmp_path)
        assert done.returncode == 0, (line, done.stderr[-3000:])
        if line.startswith("andrea fit"):
            closing = done.stdout + done.stderr
            assert "bits per byte of text" in closing and "sample ('def ' continued" in closing, closing[-2000:]
            for step in next_steps(closing):  # what the fit says to run next, as printed
                check = f"command -v {step.split()[0]}" if step.startswith("tensorboard") else step
                ran = in_the_readmes_shell(check, tmp_path)
                assert ran.returncode == 0, (step, ran.stderr[-3000:])
    report = (tmp_path / "runs" / "quickstart" / "compare" / "comparison.md").read_text()
    assert "Reference variant: **activation=gelu**" in report and "- **activation=swiglu** vs activation=gelu" in report
    assert json.loads((tmp_path / OTHER_RUN / "summary.json").read_text())["status"] == "finished"
    for flag in (["--help"], ["--config", str(REPO / "experiments/quickstart.yaml"), "--print_config"]):
        with pytest.raises(SystemExit) as leaving:
            main(["fit", *flag])
        assert leaving.value.code in (0, None)
    for argv in PLACEHOLDERS:
        if argv[0] in ("export", "import"):
            pytest.importorskip("transformers")
        assert main(_tiny(argv, text_corpus) if argv[:2] != ["fit", "--resume"] else argv) == 0, argv
    assert sorted(p.name for p in (tmp_path / "runs" / "quickstart").iterdir()) == [
        "_comparison",
        "compare",
        "version_0",
        "version_1",
    ], "validate and test start no run"
    assert (tmp_path / RUN / "validate.json").is_file()
