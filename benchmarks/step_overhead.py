"""What a training step of ``andrea fit`` costs beyond forward, backward and the optimizer, in one run.

    python benchmarks/step_overhead.py                    # 100 steps an arm, one thread
    python benchmarks/step_overhead.py --steps 200 --threads 1

Why: benchmarks/nanogpt_peer.py once timed ANDREA's median step at 4.7x nanoGPT's at nanoGPT's README CPU
shape. A model that small is where a trainer's own per-step work (Lightning's loop, logging, the stability
monitor, the non-finite guard, data loading) shows most; this says how much of the step it is.

Every arm trains ANDREA at that shape (4 blocks, 4 heads, 128 wide, block 64, batch 12, no bias, no dropout)
with experiments/cpu-base.yaml's data (stdlib, byte-level: vocab 257), learning rate and schedule, at
``--threads`` threads (OMP_NUM_THREADS for the fits, ``torch.set_num_threads`` here):

* ``andrea fit`` as a user runs it (the stability monitor on, ``log_every_n_steps`` 5), then with the
  loss logged every step (nanogpt_peer's setting: its step times are those events' gaps), then with the
  stability monitor off (``--stability.enabled false``). No validation inside the steps (it comes after the
  last one, with the held-out evaluation, untimed). Step times: the wall-clock gaps between consecutive
  ``train/loss`` events over the steps after ``--skip`` (per step where the events are 5 steps apart).
* a bare torch loop in this process: the same model and optimizer as the fit builds them (AndreaLM's
  model, its fused AdamW and warmup-cosine schedule), clip at 1.0, ``zero_grad(set_to_none=True)``, a batch
  of random tokens a step; run first and last, so that the machine's drift during the run shows.

Printed: each arm's median step (what the peer reports; a step with a probe or a flush is an outlier it
drops) and mean step (what a sweep pays: probes, flushes and logging included), in ms and over the bare
loop's (the mean of its two runs), with the 1-minute load average after each arm. On a machine busier than
its cores give ``--threads 1``: threads that wait on each other make every step several times slower.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is not on the path
    sys.path.insert(0, str(REPO))

from andrea_lab.fit.module import AndreaLM  # noqa: E402
from andrea_lab.model.config import AndreaConfig  # noqa: E402
from andrea_lab.runs import tags  # noqa: E402
from andrea_lab.runs.machine import cpu_description  # noqa: E402
from benchmarks.nanogpt_peer import ANDREA_BATCH as BATCH  # noqa: E402  (nanoGPT's README CPU batch)
from benchmarks.nanogpt_peer import ANDREA_SHAPE as SHAPE  # noqa: E402  (its shape, as model.config keys)

CPU_BASE = REPO / "experiments" / "cpu-base.yaml"
#: cpu-base's logging cadence: the default arm's loss events are this many steps apart.
LOG_EVERY = int(yaml.safe_load(CPU_BASE.read_text(encoding="utf-8"))["trainer"]["log_every_n_steps"])
#: The fits' arms: a name and what it adds to the command line.
FIT_ARMS = {
    "andrea fit (defaults)": [],
    "andrea fit, loss logged every step": ["--trainer.log_every_n_steps=1"],
    "andrea fit, stability monitor off": ["--stability.enabled=false"],
}
BARE = "bare torch loop"


def fit_command(steps: int, save_dir: Path, extra: Sequence[str]) -> list[str]:
    """``andrea fit`` on cpu-base at :data:`SHAPE`, validating only after its last step."""
    shape = [f"--model.config.{key}={str(value).lower()}" for key, value in SHAPE.items()]
    return [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        str(CPU_BASE),
        *shape,
        f"--data.batch_size={BATCH}",
        f"--trainer.max_steps={steps}",
        f"--trainer.val_check_interval={steps}",
        "--heldout.max_tokens=4096",
        f"--trainer.logger.init_args.save_dir={save_dir}",
        *extra,
    ]


def event_step_seconds(run_dir: Path, skip: int) -> list[float]:
    """Per-step seconds between consecutive ``train/loss`` events after step ``skip`` (a gap spanning k steps
    counts as k steps of gap/k each, so a median and a mean weigh steps, not events)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # seconds to import

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = sorted((e.step, e.wall_time) for e in accumulator.Scalars(tags.TRAIN_LOSS) if e.step >= skip)
    seconds = [(t2 - t1) / (s2 - s1) for (s1, t1), (s2, t2) in zip(events, events[1:]) for _ in range(s2 - s1)]
    if not seconds:
        raise SystemExit(f"{run_dir}: fewer than two train/loss events after step {skip}; cannot time a step")
    return seconds


def time_fit(steps: int, skip: int, extra: Sequence[str], env: dict[str, str]) -> list[float]:
    """One ``andrea fit`` in a temporary directory (removed after); its per-step seconds."""
    with tempfile.TemporaryDirectory(prefix="step-overhead-") as temporary:
        done = subprocess.run(
            fit_command(steps, Path(temporary), extra), cwd=temporary, capture_output=True, text=True, env=env
        )
        if done.returncode != 0:
            raise SystemExit(f"andrea fit failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
        (summary,) = Path(temporary).rglob("summary.json")
        return event_step_seconds(summary.parent, skip)


def bare_module() -> AndreaLM:
    """AndreaLM as cpu-base's ``model:`` section builds it at :data:`SHAPE` (its model carries the weight-decay
    tags, its optimizer choice the fit's); seeded as the fits are."""
    spec = yaml.safe_load(CPU_BASE.read_text(encoding="utf-8"))["model"]
    torch.manual_seed(0)
    return AndreaLM(**{**spec, "config": AndreaConfig(**{**spec["config"], **SHAPE})})


def time_bare(steps: int, skip: int) -> list[float]:
    """The bare loop's per-step seconds after ``skip`` steps: forward, backward, clip, optimizer, schedule."""
    module = bare_module()
    model, vocab = module.model, module.config.vocab_size
    optimizer, scheduler, _ = module.optimizer_choice.build(model, steps, fused=True)
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        tokens = torch.randint(vocab, (BATCH, SHAPE["block_size"] + 1))
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        seconds.append(time.perf_counter() - started)
    return seconds[skip:]


def table(timings: dict[str, list[float]], loads: dict[str, float]) -> pd.DataFrame:
    """One row an arm: median and mean step (ms), each over the bare loop's (the mean of its runs)."""
    frame = pd.DataFrame(
        {
            "median ms": {arm: 1000 * statistics.median(s) for arm, s in timings.items()},
            "mean ms": {arm: 1000 * statistics.fmean(s) for arm, s in timings.items()},
            "load": loads,
        }
    )
    bare = frame.loc[[arm for arm in frame.index if arm.startswith(BARE)]].mean()
    frame.insert(1, "median / bare", frame["median ms"] / bare["median ms"])
    frame.insert(3, "mean / bare", frame["mean ms"] / bare["mean ms"])
    return frame


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps an arm (default 100)")
    parser.add_argument("--skip", type=int, default=10, help="first steps left out of the timing (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="threads for every arm (default 1)")
    return parser


def checked(args: argparse.Namespace) -> Optional[str]:
    """The one line refusing a bad argument, or None."""
    if args.threads < 1:
        return f"--threads {args.threads}: give at least 1"
    if args.skip < 0:
        return f"--skip {args.skip}: give 0 or more"
    least = args.skip + 2 * LOG_EVERY  # two gaps between the default arm's events after the skip
    if args.steps < least:
        return f"--steps {args.steps}: give at least --skip + {2 * LOG_EVERY} = {least} (two timed gaps after the skip)"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    problem = checked(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    print(f"CPU: {cpu_description()['cpu']}; torch {torch.__version__}, {args.threads} thread(s) an arm")
    print(f"nanoGPT's README CPU shape {SHAPE}, batch {BATCH}, cpu-base's data")
    print(f"{args.steps} steps an arm, the first {args.skip} untimed; load average before: {os.getloadavg()[0]:.2f}")
    timings, loads = {}, {}
    arms = [(f"{BARE} (first)", None), *FIT_ARMS.items(), (f"{BARE} (last)", None)]
    for arm, extra in arms:
        timings[arm] = (
            time_bare(args.steps, args.skip) if extra is None else time_fit(args.steps, args.skip, extra, env)
        )
        loads[arm] = os.getloadavg()[0]
        print(f"  {arm} measured", file=sys.stderr, flush=True)
    print(table(timings, loads).to_string(float_format=lambda value: f"{value:.2f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
