"""The ``andrea`` command.

``andrea fit|validate|test|predict`` is LightningCLI, unchanged in behaviour (repeated ``--config``,
dotted overrides, ``--print_config``, ``config.yaml`` saved in the run directory). Our own tools are
further subcommands, each a module ``andrea_lab.commands.<name>`` with ``main(argv) -> int``.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import os
import re
import signal
import stat
import sys
from typing import Any

from andrea_lab import __version__
from andrea_lab.commands.quiet import quiet_third_party
from andrea_lab.errors import (
    DEBUG_ENV_VAR,
    AndreaError,
    DiskFullError,
    DivergenceError,
    MissingFileError,
    PreemptedError,
    UsageError,
)
from andrea_lab.files import disk_full_cause
from andrea_lab.runs.directory import read_record, resume_checkpoint
from andrea_lab.safe_yaml import read_yaml

#: Our subcommands beside LightningCLI's; each is a module in andrea_lab.commands.
OWN_COMMANDS = {
    "params": "parameter breakdown of a preset or config",
    "generate": "sample text from a checkpoint",
    "plugins": "list installed plugins (and broken ones); --check runs them",
    "sweep": "run every variant x learning rate x seed of a suite (resumable)",
    "compare": "compare finished runs: tables, CSV/Markdown and plots",
    "trace": "follow one token through every block of a checkpoint: geometry, logit lens, attribution",
    "lens": "the logit lens's held-out loss after every block of a checkpoint",
    "new-plugin": "write a ready plugin package (pyproject, class, tests using andrea_lab.plugin.testing)",
    "heldout": "what a configuration's held-out score is made of: documents, largest share, overlap with training",
    "tokenize": "tokenize a corpus (JSONL, Parquet, datasets...) into llm.c shards, in parallel, resumable",
    "export": "a checkpoint as a Hugging Face transformers directory (--to hf)",
    "import": "a Hugging Face GPT-2 directory as a checkpoint (--from-hf)",
}
#: A command whose module is not its name with '-' as '_' (``import`` is a Python keyword).
COMMAND_MODULES = {"import": "import_hf"}
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
#: Exit status of a fit stopped by the divergence policy (distinct from 1 = crash, 2 = bad input).
DIVERGED_EXIT_STATUS = DivergenceError.exit_status


def _usage() -> str:
    lines = [
        "usage: andrea <command> [options]   (andrea --version: which andrea-lab)",
        "",
        "Lightning commands (see `andrea fit --help`):",
    ]
    lines += [f"  {name}" for name in LIGHTNING_COMMANDS]
    lines += ["", "andrea-lab commands:"]
    lines += [f"  {name:<10} {help_}" for name, help_ in OWN_COMMANDS.items()]
    return "\n".join(lines)


def check_config_files(argv: list[str]) -> None:
    """Name the file when a ``--config`` YAML is missing, malformed, not UTF-8, not a regular file (a FIFO
    would make the parser wait forever) or past :mod:`andrea_lab.safe_yaml`'s bounds (the parser would not)."""
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            continue
        if not os.path.lexists(path):
            raise MissingFileError(f"config file {path!r} does not exist")
        refuse_special_files(read_yaml(path, "config file"), f"config file {path}")
    refuse_special_files(argv, "the command line")


def _strings(value: Any):
    """Every string in a loaded YAML value (lists and mappings walked, without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def refuse_special_files(value: Any, where: str) -> None:
    """A value that names a FIFO, a device or a socket is refused: the parser reads a value that names a file
    as that file's YAML, and a FIFO with no writer would make it wait forever."""
    for text in _strings(value):
        if len(text) > 4096 or "\0" in text:
            continue
        try:
            mode = os.stat(text.split("=", 1)[-1] if text.startswith("--") else text).st_mode
        except (OSError, ValueError):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UsageError(
                f"{where} names {text!r}, which is not a regular file or a directory (a FIFO, a device or a "
                "socket); a value that names a file must name a regular file"
            )


def check_checkpoint_path(argv: list[str]) -> None:
    """A missing or damaged ``--ckpt_path`` is named before LightningCLI tries to unpickle it."""
    # torch and Lightning (~5 s): only a fit with --ckpt_path needs them
    from andrea_lab.runs.checkpoint_io import verify_checkpoint

    for i, arg in enumerate(argv):
        path = (
            argv[i + 1]
            if arg == "--ckpt_path" and i + 1 < len(argv)
            else (arg.split("=", 1)[1] if arg.startswith("--ckpt_path=") else None)
        )
        if path and path not in ("last", "best", "hpc", "registry", "null"):
            verify_checkpoint(path)


def expand_resume(argv: list[str]) -> list[str]:
    """``fit --resume RUN_DIR [overrides]`` -> ``fit --config RUN_DIR/config.yaml --ckpt_path CKPT`` with the
    logger pointed at RUN_DIR itself: the run continues in its own directory from its newest checkpoint
    (``preempted.ckpt`` or ``last.ckpt``, :func:`andrea_lab.runs.directory.resume_checkpoint`)."""
    if "--resume" not in argv and not any(arg.startswith("--resume=") for arg in argv):
        return argv
    rest, run_dir = [], None
    for i, arg in enumerate(argv):
        if arg.startswith("--resume="):
            run_dir = arg.split("=", 1)[1]
        elif arg == "--resume":
            if i + 1 >= len(argv):
                raise UsageError("--resume needs a run directory, e.g. --resume runs/quickstart/version_0")
            run_dir = argv[i + 1]
        elif i == 0 or argv[i - 1] != "--resume":
            rest.append(arg)
    if rest[:1] != ["fit"]:
        raise UsageError("--resume is an option of `andrea fit`: andrea fit --resume RUN_DIR")
    config, ckpt = os.path.join(run_dir, "config.yaml"), resume_checkpoint(run_dir)
    if not os.path.isfile(config) or ckpt is None:
        raise MissingFileError(
            f"--resume {run_dir}: not a run directory with a config.yaml and a checkpoint "
            f"(checkpoints/preempted.ckpt or checkpoints/last.ckpt); pass runs/NAME/version_N"
        )
    if os.path.basename(ckpt) != "preempted.ckpt":
        refuse_finished_run(run_dir, rest[1:])
    version = os.path.basename(os.path.normpath(run_dir))
    return [
        "fit",
        "--config",
        config,
        "--trainer.logger.init_args.version",
        version,
        *_own_cache(run_dir, config, rest[1:]),
        *rest[1:],
        "--ckpt_path",
        str(ckpt),
    ]


def _own_cache(run_dir: str, config: str, given: list[str]) -> list[str]:
    """A run's config.yaml is a record, and a path in it is data: a ``data.cache_dir`` it names (edited, or
    from another machine) is not where a resumed fit tokenizes. The user's own cache is used and that is said;
    ``--data.cache_dir`` on the command line still chooses one."""
    data = read_yaml(config, f"--resume {run_dir}: config.yaml")
    data = data.get("data") if isinstance(data, dict) else None
    cache_dir = data.get("cache_dir") if isinstance(data, dict) else None
    if cache_dir is None or _override(given, "--data.cache_dir") is not None:
        return []
    print(
        f"note: --resume {run_dir}: its config.yaml names data.cache_dir {cache_dir}; a path in a run's record "
        "is not used to write, so the tokens are cached in your own cache (pass --data.cache_dir to choose one)",
        file=sys.stderr,
    )
    return ["--data.cache_dir", "null"]


def resumed_run(argv: list[str]) -> str | None:
    """The run directory of ``fit --resume RUN_DIR`` (None without ``--resume``): the fit must continue there."""
    for i, arg in enumerate(argv):
        if arg.startswith("--resume="):
            return arg.split("=", 1)[1]
        if arg == "--resume" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _override(args: list[str], key: str) -> str | None:
    """The value ``args`` give ``key`` (``--key V`` or ``--key=V``), the last one winning; None if none."""
    found = None
    for i, arg in enumerate(args):
        if arg == key and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(key + "="):
            found = arg.split("=", 1)[1]
    return found


def refuse_finished_run(run_dir: str, overrides: list[str]) -> None:
    """A run that finished has nothing to resume: say so, and how to extend it, before anything is read or
    written (resuming it would re-run the held-out evaluation and rewrite its record with nothing trained).
    A ``--trainer.max_steps`` beyond the steps it trained extends it."""
    record = read_record(run_dir)
    if record is None or record.status != "finished":
        return
    wanted = _override(overrides, "--trainer.max_steps")
    try:
        if wanted is not None and int(wanted) > record.steps:
            return
    except ValueError:
        return  # not a number: the parser names it
    raise UsageError(
        f"--resume {run_dir}: the run finished after {record.steps} steps; there is nothing to resume and its "
        f"record is left as it is. To train it further, give more steps: andrea fit --resume {run_dir} "
        f"--trainer.max_steps {max(2 * record.steps, record.steps + 1)}"
    )


def run_lightning(argv: list[str]) -> int:
    # Lightning (~5 s): `andrea --help` and the light commands start without it
    from andrea_lab.fit.cli import AndreaCLI

    resume_dir = resumed_run(argv)
    argv = expand_resume(argv)
    check_config_files(argv)
    check_checkpoint_path(argv)
    # LightningCLI reads sys.argv. When called from Python with other arguments, present them there;
    # from the console leave sys.argv alone: Lightning's DDP launcher re-runs it for the other ranks.
    saved = sys.argv
    if sys.argv[1:] != argv:
        sys.argv = ["andrea", *argv]
    try:
        AndreaCLI(resume_dir=resume_dir)
    finally:
        sys.argv = saved
    return 0


#: errnos of an OSError that are about a path the user chose (unwritable, under a file, read-only, ...).
PATH_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}
)


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def environment_error(exc: BaseException) -> str | None:
    """One line for what is the machine's or the paths' doing rather than a bug: a path that cannot be
    written (or read) as asked, or memory a model or batch of the size asked cannot get; None otherwise."""
    for cause in _chain(exc):
        if isinstance(cause, OSError) and cause.errno in PATH_ERRNOS and cause.filename:
            return (
                f"cannot use {cause.filename}: {cause.strerror}; pass a path in a directory this user can "
                "write (a file of that name, or a read-only directory, is in the way)"
            )
        text = str(cause)
        if isinstance(cause, MemoryError) or (
            isinstance(cause, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())
        ):
            asked = re.search(r"allocate (\d+) bytes", text)
            size = f" {int(asked.group(1)) / 1e9:.1f} GB" if asked else ""
            said = f"{type(cause).__name__}: {text.splitlines()[0][:120]}" if text else type(cause).__name__
            return (
                f"out of memory allocating{size} ({said}): the "
                "model or batch asked for does not fit on this machine; choose a smaller d_model, n_layer, "
                "vocab_size or batch_size (`andrea params --config FILE` shows a model's size)"
            )
    return None


def disk_full_message(cause: OSError) -> str:
    """One line for a full disk met by a writer that does not replace files atomically itself: which file,
    and that files replaced atomically (checkpoints, summary.json, configs, reports) are intact."""
    where = f" while writing {cause.filename}" if cause.filename else ""
    return (
        f"the disk is full ({os.strerror(cause.errno)}){where}; checkpoints, records and reports already written "
        "are intact (they are replaced only once complete). Free space (or point the output elsewhere) and run "
        "again; a fit continues with `andrea fit --resume RUN`"
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"andrea-lab {__version__}")
        return 0
    command = argv[0]
    quiet_third_party()
    try:
        if command in OWN_COMMANDS:
            name = COMMAND_MODULES.get(command, command.replace("-", "_"))
            if {"-h", "--help"} & set(argv[1:]) and importlib.util.find_spec(f"andrea_lab.commands.{name}_args"):
                # A command whose work imports seconds of libraries keeps its parser apart: --help answers at once.
                importlib.import_module(f"andrea_lab.commands.{name}_args").build_parser().parse_args(argv[1:])
            module = importlib.import_module(f"andrea_lab.commands.{name}")
            status = module.main(argv[1:])
            sys.stdout.flush()  # here, so that a reader that closed the pipe is met inside this try
            return status
        return run_lightning(argv)
    except BrokenPipeError:  # `andrea compare ... | head`: the reader has what it wanted; stop as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 128 + signal.SIGPIPE
    except argparse.ArgumentError as exc:
        print(f"andrea {command}: error: {exc}\n(see `andrea {command} --help` for every option)", file=sys.stderr)
        return 2
    except AndreaError as exc:  # one message, no traceback (unless ANDREA_LAB_DEBUG is set)
        if os.environ.get(DEBUG_ENV_VAR):
            raise
        if isinstance(exc, (DivergenceError, PreemptedError)):  # not a mistake to fix: it worked as configured
            print(f"andrea {command}: {exc}", file=sys.stderr)
        else:
            print(f"andrea {command}: error: {exc}", file=sys.stderr)
            print(f"(set {DEBUG_ENV_VAR}=1 for the full traceback)", file=sys.stderr)
        return getattr(exc, "exit_status", 2)
    except (OSError, MemoryError, RuntimeError) as exc:
        full = None if os.environ.get(DEBUG_ENV_VAR) else disk_full_cause(exc)
        if full is not None:  # a writer without its own handling (event files, plots, exports) ran out of disk
            print(f"andrea {command}: error: {disk_full_message(full)}", file=sys.stderr)
            return DiskFullError.exit_status
        message = None if os.environ.get(DEBUG_ENV_VAR) else environment_error(exc)
        if message is None:
            raise
        print(f"andrea {command}: error: {message}\n(set {DEBUG_ENV_VAR}=1 for the full traceback)", file=sys.stderr)
        return UsageError.exit_status


if __name__ == "__main__":
    sys.exit(main())
