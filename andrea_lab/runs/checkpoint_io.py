"""Checkpoints that are written atomically and verified when read.

Lightning writes a checkpoint straight to its final name, so a crash (or a kill, or a full disk)
during the write leaves a truncated ``last.ckpt`` where the last good one used to be. Here each
checkpoint goes to a temporary file in the same directory, is flushed to disk, and only then renamed
over the final name; beside it a small manifest (``NAME.ckpt.sha256.json``: size and sha256) lets
a later load detect a damaged file and say so, instead of failing inside unpickling.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from tokenizers import Tokenizer

from andrea_lab.data.checkpoint_state import DATA_STATE_KEY, TOKENIZER_STATE_KEY
from andrea_lab.data.tokenizer import tokenizer_from_json
from andrea_lab.errors import DiskFullError, MissingFileError, UsageError
from andrea_lab.files import load_json, manifest_path, publish, sha256_file, write_temp  # noqa: F401 (manifest_path re-exported)
from andrea_lab.model.registry import require_registered
from andrea_lab.runs.handed_hparams import check_checkpoint_settings, plugin_names

#: Checkpoints this process has already verified, by what ``stat`` says of the file and of its manifest.
#: A ``--ckpt_path`` is checked by the CLI before LightningCLI starts, read by ``_parse_ckpt_path`` and
#: loaded by the trainer: one sha256 of a 1.4 GB file is enough unless either file changed in between.
_verified: set[tuple] = set()


def _stat_identity(*files: Path) -> tuple:
    return tuple(
        (os.fspath(f.resolve()), s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns)
        for f, s in ((f, f.stat()) for f in files)
    )


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise a clear error if ``path`` is missing or disagrees with its manifest (when it has one).
    Hashed once per process while neither the file nor its manifest changes (``_verified``)."""
    file = Path(path)
    if not file.is_file():
        raise MissingFileError(
            f"checkpoint {os.fspath(path)!r} does not exist; pass the path of a .ckpt file, "
            f"e.g. runs/quickstart/version_0/checkpoints/last.ckpt"
        )
    manifest = manifest_path(file)
    if not manifest.is_file():
        return  # written elsewhere (plain Lightning): nothing to check against
    expected = load_json(manifest, "checkpoint manifest")
    if not (
        isinstance(expected, dict)
        and isinstance(expected.get("bytes"), int)
        and isinstance(expected.get("sha256"), str)
    ):
        raise UsageError(
            f"checkpoint manifest {manifest} is damaged (it needs an integer 'bytes' and a string "
            f"'sha256'); remove it to load {file.name} unchecked, or use an earlier checkpoint"
        )
    size = file.stat().st_size
    if size != expected["bytes"]:
        raise UsageError(
            f"checkpoint {file} is damaged: {size} bytes, but {expected['bytes']} were written "
            f"(truncated or overwritten); use an earlier checkpoint of the run"
        )
    identity = _stat_identity(file, manifest)
    if identity in _verified:
        return
    if sha256_file(file) != expected["sha256"]:
        raise UsageError(
            f"checkpoint {file} is damaged: its sha256 differs from the one recorded when it was "
            f"written; use an earlier checkpoint of the run"
        )
    _verified.add(identity)


class UnsafeCheckpointError(UsageError):
    """A checkpoint that only loads by running code from it (a pickled object the weights-only loader
    refuses): never loaded (exit status 2)."""


def _refusal(exc: BaseException) -> str:
    """The line of PyTorch's weights-only refusal that names what the file wanted to run."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if "Unsupported" in line or "global" in line.lower()]
    return (named or lines or [type(exc).__name__])[0][:300]


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """The one way andrea reads a checkpoint: manifest check, then ``torch.load(weights_only=True)``.

    Every checkpoint ``andrea fit`` writes loads this way (tensors, numbers, strings and containers only:
    numpy's RNG state is stored as a tensor for exactly this reason), so nothing is gained by unpickling
    arbitrary objects -- and a shared or downloaded checkpoint could run code if it were. A file that
    needs more is refused with :class:`UnsafeCheckpointError`, naming it and what it asked for."""
    verify_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpointError(
            f"checkpoint {os.fspath(path)} was refused: it holds objects that only load by running code "
            f"({_refusal(exc)}). andrea loads checkpoints weights-only; every checkpoint `andrea fit` writes "
            "loads that way. Use a checkpoint from a run you trust, or convert this one where you trust it"
        ) from None
    except Exception as exc:
        raise UsageError(
            f"{os.fspath(path)} is not a readable PyTorch checkpoint: {type(exc).__name__}: {_refusal(exc)}"
        ) from None
    # Its settings are the file's choice: plain values only, plugins by registered name (handed_hparams).
    source = f"checkpoint {os.fspath(path)}"
    if isinstance(checkpoint, dict):
        check_checkpoint_settings(checkpoint, source)
        require_registered(plugin_names(stored_hyperparameters(checkpoint)), source)
    return checkpoint


def stored_hyperparameters(checkpoint: Any) -> dict[str, Any]:
    """The module's hyperparameters a checkpoint holds (``hyper_parameters``, a copy; empty if none),
    without LightningCLI's ``_instantiator`` (not an argument): ``AndreaLM(**them)`` rebuilds the module."""
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict):
        return {}
    return {key: value for key, value in hparams.items() if key != "_instantiator"}


def stored_model_config(checkpoint: Any) -> Optional[dict[str, Any]]:
    """The model config a checkpoint was trained with (``hyper_parameters.config``), or None: the one
    reader of it (resume, init_from, generate, trace, lens, export).

    Its plugin names are the file's choice, not the user's: :func:`load_checkpoint` lets them (and the
    optimizer's and schedule's) select installed entry points only (a name such as ``evilmod:Act`` would
    otherwise import ``evilmod``)."""
    config = stored_hyperparameters(checkpoint).get("config")
    return config if isinstance(config, dict) else None


def stored_data_state(checkpoint: Any) -> dict[str, Any]:
    """The state an ``AndreaDataModule`` fit (or ``andrea import``) saved in the checkpoint: its tokenizer,
    end-of-text id, vocabulary size and corpus; empty when it has none."""
    state = checkpoint.get(DATA_STATE_KEY) if isinstance(checkpoint, dict) else None
    return state if isinstance(state, dict) else {}


def stored_tokenizer(checkpoint: Any) -> Optional[Tokenizer]:
    """The tokenizer an ``AndreaDataModule`` fit saved in the checkpoint, or None if it has none."""
    text = stored_data_state(checkpoint).get(TOKENIZER_STATE_KEY)
    if not isinstance(text, str):
        return None
    return tokenizer_from_json(text)


#: Weight files an import reads: safetensors (no code at all), or a pickle through the weights-only loader.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def load_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict from a weights file someone handed you (the loader imports build on).

    ``.safetensors`` is read with the ``safetensors`` library, which holds tensors and a JSON header
    and cannot run code; a pickled ``pytorch_model.bin`` (or ``.pt``/``.pth``/``.ckpt``) only through
    :func:`load_checkpoint`, weights-only. A Lightning checkpoint gives its ``state_dict``."""
    file = Path(path)
    if file.suffix not in WEIGHT_SUFFIXES:
        raise UsageError(f"{file} is not a weights file andrea reads; valid: {', '.join(WEIGHT_SUFFIXES)}")
    if file.suffix != ".safetensors":
        loaded = load_checkpoint(file)
        state = loaded.get("state_dict", loaded) if isinstance(loaded, dict) else None
    else:
        if not file.is_file():
            raise MissingFileError(f"weights file {os.fspath(path)!r} does not exist")
        from safetensors.torch import load_file

        try:
            state = load_file(file, device="cpu")
        except Exception as exc:  # safetensors raises its own SafetensorError, or OSError, on a damaged file
            raise UsageError(
                f"{file} is not a readable safetensors file: {type(exc).__name__}: {_refusal(exc)}"
            ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{file} holds no state dict (a mapping of names to tensors)")
    return state


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic writes and size/sha256 verification on load."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        """Both the checkpoint and its manifest are written in full to temporary files before either
        replaces anything, so a full disk (the only failure that needs space) leaves the previous pair
        as it was, and says so: :class:`DiskFullError`, exit status 5."""
        target = Path(path)
        tmp_manifest = None
        try:
            tmp = write_temp(target, lambda file: torch.save(checkpoint, file))
            try:
                record = {"bytes": tmp.stat().st_size, "sha256": sha256_file(tmp)}
                tmp_manifest = write_temp(manifest_path(target), lambda file: file.write(json.dumps(record).encode()))
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        except DiskFullError as exc:
            last = target.parent / "last.ckpt"
            hint = f" (e.g. {last})" if last.is_file() else ""
            raise DiskFullError(
                f"{exc}; the run's earlier checkpoints are intact: resume from one with --ckpt_path{hint}"
            ) from None
        # Both files are complete on disk before either is renamed (files.publish), so only a crash between
        # the two renames can pair a new checkpoint with the old manifest: its load then says "damaged".
        try:
            publish(tmp, target)
        except BaseException:
            tmp_manifest.unlink(missing_ok=True)
            raise
        publish(tmp_manifest, manifest_path(target))

    def load_checkpoint(self, path, map_location: Optional[Any] = None, weights_only: Optional[bool] = None):
        """Resume, validate, test: always weights-only (:func:`load_checkpoint`), whatever is asked."""
        return load_checkpoint(path, map_location=map_location)

    def remove_checkpoint(self, path) -> None:
        """Unlink one checkpoint file and its manifest. Never a directory (Lightning's own removal is
        recursive): a path that names one came from somewhere it should not have, and is left alone."""
        file = Path(path)
        if file.is_dir() and not file.is_symlink():
            rank_zero_warn(f"not removing {file}: it is a directory, not a checkpoint file")
            return
        file.unlink(missing_ok=True)
        manifest_path(path).unlink(missing_ok=True)
