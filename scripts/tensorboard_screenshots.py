"""Screenshots of a real TensorBoard, in a real headless browser, of a small sweep: what a user sees on
opening the HParams, Custom Scalars and Text dashboards, before any click.

    python scripts/tensorboard_screenshots.py --out shots            # a tiny sweep, then the screenshots
    python scripts/tensorboard_screenshots.py --out shots --logdir runs   # an existing log directory

Without ``--logdir`` it trains the tiny sweep that tests/experiments/compare/test_tensorboard_report.py checks
(andrea_lab/experiments/sweep/tiny_suite.py: two variants x two learning rates, one seed, six steps; at LR 3 both
diverge) on a few standard-library modules, runs
``andrea compare`` on it, serves it with TensorBoard (in this process) and has Chromium
(``apt-get install -y chromium``) take one PNG per dashboard into ``--out``. A minute or two on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The dashboards shot, as TensorBoard's URL fragments.
PAGES = ("hparams", "custom_scalars", "text", "scalars")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def tiny_sweep(root: Path) -> Path:
    """Train the tiny suite under ``root/runs`` (in this process) and compare it; returns ``root/runs``."""
    from andrea_lab.cli import main as andrea
    from andrea_lab.experiments.sweep.tiny_suite import NAME, train_tiny_suite, write_tiny_suite

    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py"):
        shutil.copy(stdlib / name, corpus / name)
    suite = write_tiny_suite(root / "tiny.yaml", REPO / "experiments" / "cpu-base.yaml", corpus)
    os.environ.setdefault("ANDREA_LAB_CACHE", str(root / "cache"))
    try:
        train_tiny_suite(suite, root / "runs")
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    if andrea(["compare", str(root / "runs" / NAME)]) != 0:
        raise SystemExit("andrea compare failed")
    return root / "runs"


def serve(logdir: Path) -> str:
    """TensorBoard on ``logdir`` in this process, loaded before it answers; its URL."""
    from tensorboard import program

    board = program.TensorBoard()
    board.configure(
        argv=[
            None,
            "--logdir",
            str(logdir),
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--load_fast",
            "false",
            "--reload_task",
            "blocking",
            "--reload_interval",
            "0",
        ]
    )
    return board.launch()


def shoot(url: str, png: Path, size: str, wait_ms: int) -> None:
    """One screenshot of ``url`` by headless Chromium with a fresh profile."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                f"--virtual-time-budget={wait_ms}",
                f"--screenshot={png}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the PNGs (and the tiny sweep) go")
    parser.add_argument("--logdir", type=Path, help="an existing log directory instead of the tiny sweep")
    parser.add_argument("--size", default="1800,1100", help="browser window, WIDTH,HEIGHT (default: %(default)s)")
    parser.add_argument("--wait-ms", type=int, default=15000, help="virtual time the page gets to load")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logdir = args.logdir or tiny_sweep(args.out / "sweep")
    url = serve(logdir)
    for page in PAGES:
        png = args.out / f"{page}.png"
        shoot(f"{url}#{page}", png, args.size, args.wait_ms)
        print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
