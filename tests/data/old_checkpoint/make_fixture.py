"""Write ``andrea-lm-2026-12-02.ckpt``: a checkpoint exactly as `andrea fit` wrote one on 2026-12-02, before
AndreaLM's training arguments became a dataclass (andrea_lab/fit/args.py), kept so that every later
change of the module is tested against a file its users already have (tests/test_old_checkpoint.py).

Made with andrea-lab at commit f345e43 (run from the repository root, with that commit checked out):

    python tests/data/old_checkpoint/make_fixture.py

A d_model-16, one-layer, byte-level model trained 4 steps on ``corpus.txt`` (beside this script; the fit
runs in a temporary directory with the corpus and the cache given relative to it, so a test can resume the
run from any directory that holds ``corpus.txt``). Do not regenerate it with newer code: its value is that
it was written by the old code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
NAME = "andrea-lm-2026-12-02.ckpt"

#: The arguments of the fit, also used by the test that resumes it.
FIT_ARGS = [
    "--config",
    str(REPO / "experiments/quickstart.yaml"),
    "--seed_everything",
    "7",
    "--model.config.vocab_size",
    "257",
    "--data.tokenizer",
    "byte",
    "--model.config.d_model",
    "16",
    "--model.config.n_layer",
    "1",
    "--model.config.n_head",
    "2",
    "--model.config.block_size",
    "16",
    "--model.lr",
    "3e-3",
    "--model.warmup_steps",
    "2",
    "--model.z_loss",
    "1e-4",
    "--model.on_nonfinite",
    "skip",
    "--data.batch_size",
    "4",
    "--data.corpus",
    "corpus.txt",
    "--data.cache_dir",
    "cache",
    "--trainer.max_steps",
    "4",
    "--trainer.val_check_interval",
    "2",
    "--trainer.limit_val_batches",
    "1",
    "--trainer.num_sanity_val_steps",
    "1",
    "--trainer.log_every_n_steps",
    "1",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
    "--heldout.max_tokens",
    "256",
    "--stability.interval",
    "2",
    "--trainer.logger.init_args.save_dir",
    "runs",
]


def main() -> None:
    from andrea_lab.cli import main as andrea

    work = Path(tempfile.mkdtemp(prefix="andrea-fixture-"))
    shutil.copy(HERE / "corpus.txt", work / "corpus.txt")
    previous = os.getcwd()
    os.chdir(work)
    try:
        assert andrea(["fit", *FIT_ARGS]) == 0
    finally:
        os.chdir(previous)
    last = work / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    shutil.copy(last, HERE / NAME)
    shutil.copy(f"{last}.sha256.json", HERE / f"{NAME}.sha256.json")
    print(f"{HERE / NAME}: {(HERE / NAME).stat().st_size} bytes")


if __name__ == "__main__":
    main()
