"""`andrea params`: the parameter breakdown of a preset or of an experiment's model config, and which
parameters the optimizer updates with which rule and decays (``--optimizer``, else the YAML's
``model.optimizer``, else adamw)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from andrea_lab.errors import MissingFileError
from andrea_lab.inside.optimizer_groups import format_optimizer_groups, optimizer_groups
from andrea_lab.inside.params import format_breakdown, parameter_breakdown, spec_check
from andrea_lab.model.config import PRESETS, AndreaConfig, ConfigError, preset
from andrea_lab.safe_yaml import read_yaml


def model_section(path: str) -> dict:
    """The ``model`` section of an experiment YAML (plain or class_path/init_args form)."""
    file = Path(path)
    if not file.is_file():
        raise MissingFileError(f"config file {path!r} does not exist")
    document = read_yaml(file, "config file") or {}
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: an experiment YAML is a mapping (trainer, model, data), got {document!r}")
    model = document.get("model") or {}
    return model.get("init_args", model)


def config_from_yaml(path: str) -> AndreaConfig:
    """The ``model.config`` section of an experiment YAML (plain or class_path/init_args form)."""
    section = model_section(path).get("config") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: model.config must be a mapping of AndreaConfig fields, got {section!r}")
    try:
        return AndreaConfig(**section)
    except TypeError as exc:
        valid = ", ".join(AndreaConfig.__dataclass_fields__)
        raise ConfigError(f"{path}: {exc}; valid model.config keys: {valid}") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="andrea params", description=__doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", default=None, help=f"one of: {', '.join(PRESETS)} (default andrea-120m)")
    source.add_argument("--config", help="an experiment YAML; its model.config section is used")
    parser.add_argument(
        "--optimizer", default=None, help="the optimizer whose parameter groups to show (default: the YAML's, or adamw)"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    args = parser.parse_args(argv)
    optimizer = args.optimizer
    if args.config:
        config, name = config_from_yaml(args.config), args.config
        optimizer = optimizer or model_section(args.config).get("optimizer")
    else:
        name = args.preset or "andrea-120m"
        config = preset(name)
    optimizer = optimizer or "adamw"
    breakdown, groups = parameter_breakdown(config), optimizer_groups(config, optimizer)
    if args.json:
        as_json = {"name": name, "config": config.to_dict(), **breakdown.as_dict()}
        as_json["optimizer_groups"] = {"optimizer": optimizer, "groups": groups.to_dict(orient="records")}
        print(json.dumps(as_json, indent=2, default=int))
        return 0
    print(format_breakdown(breakdown, name))
    if name == "andrea-120m":
        print(spec_check(breakdown))
    print("\n" + format_optimizer_groups(groups, optimizer))
    return 0
