"""``andrea compare``'s report as a TensorBoard run of its own, so the verdicts sit beside the curves.

The run is ``<suite directory>/_comparison`` (:data:`andrea_lab.runs.directory.COMPARISON_RUN`): each section of
the report (variants, claims, per learning rate, at initialisation, notes, legend) is a Markdown text
(TensorBoard's Text dashboard renders the tables), each plot an image (the Images dashboard). It holds no
hparams session, so the HParams dashboard does not count it as a run, and ``andrea compare`` skips it.

A later compare replaces the run as a whole (written aside, then swapped in), so TensorBoard never shows
two versions of a verdict; a ``_comparison`` directory holding anything but event files is not ours and
is left alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from andrea_lab.errors import UsageError
from andrea_lab.runs.directory import COMPARISON_RUN

EVENT_PREFIX = "events.out.tfevents."


def comparison_run_dir(run_paths: Iterable[str | Path], root: str | Path) -> Path:
    """Where a suite's report run goes: ``_comparison`` in the directory that holds its variants'
    directories (``<runs>/<suite>/`` for a sweep), never above the directory being compared."""
    root = Path(root).resolve()
    grandparents = [Path(path).resolve().parent.parent for path in run_paths]
    common = Path(os.path.commonpath(grandparents)) if grandparents else root
    if common != root and root not in common.parents:
        common = root
    return common / COMPARISON_RUN


def _rgb(path: Path):
    """A PNG as an (H, W, 3) array in [0, 1], read with matplotlib (which wrote it)."""
    from matplotlib.image import imread

    return imread(path)[..., :3]


def _check_ours(directory: Path) -> None:
    foreign = [p.name for p in directory.iterdir() if not p.name.startswith(EVENT_PREFIX)] if directory.is_dir() else []
    if directory.exists() and (foreign or not directory.is_dir()):
        raise UsageError(
            f"{directory} exists and holds {', '.join(sorted(foreign)) or 'a file'}, which andrea "
            "compare did not write; move it away, or pass --no-tensorboard"
        )


def section_tags(sections: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(tag, Markdown)`` of each section: ``comparison/0_variants``, ``comparison/1_claims``... TensorBoard's
    Text dashboard lists tags alphabetically, so the number keeps the report's order (verdicts first)."""
    return [(f"comparison/{n}_{key}", text) for n, (key, text) in enumerate(sections)]


def write_comparison_run(
    directory: Path, sections: Sequence[tuple[str, str]], images: Mapping[str, Path], step: int = 0
) -> Path:
    """Write the report's ``(key, Markdown)`` sections as texts (:func:`section_tags`) and the PNG ``images``
    as images ``comparison/<key>`` into the TensorBoard run ``directory``, replacing an earlier one."""
    from torch.utils.tensorboard import SummaryWriter

    directory = Path(directory)
    _check_ours(directory)
    staging = directory.with_name(f"{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    writer = SummaryWriter(str(staging))
    try:
        for tag, text in section_tags(sections):
            writer.add_text(tag, text, step)
        for key, path in images.items():
            writer.add_image(f"comparison/{key}", _rgb(Path(path)), step, dataformats="HWC")
    finally:
        writer.close()
    old = directory.with_name(f"{directory.name}.old-{os.getpid()}")
    if directory.exists():
        os.rename(directory, old)
    os.rename(staging, directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory
