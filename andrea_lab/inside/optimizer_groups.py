"""Which parameters an optimizer updates with which rule and which it decays, as ``andrea params`` shows it.

Read off the model (on the meta device) through the one place that decides it,
:mod:`andrea_lab.model.param_groups`, with the optimizer plugin's own ``groups`` declaration: what is printed
is what ``andrea fit`` builds.
"""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import torch

from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.param_groups import PARAMETER_ROLES, parameter_assignment, tag_parameters
from andrea_lab.model.registry import describe_selection, resolve
from andrea_lab.model.transformer import Andrea


def optimizer_groups(config: AndreaConfig, optimizer: str) -> pd.DataFrame:
    """One row per (role, update rule, decay): how many tensors and parameters (a tied tensor once)."""
    with torch.device("meta"):
        model = Andrea(config)
    tag_parameters(model)
    rows = pd.DataFrame(
        [
            {**asdict(row), "parameters": int(torch.Size(row.shape).numel())}
            for row in parameter_assignment(
                model, resolve("optimizer", optimizer).groups, describe_selection("optimizer", optimizer)
            )
        ]
    )
    table = rows.groupby(["role", "rule", "decay"], sort=False).agg(
        tensors=("name", "size"), parameters=("parameters", "sum"), example=("name", "first")
    )
    order = {role: i for i, role in enumerate(PARAMETER_ROLES)}
    return table.reset_index().sort_values("role", key=lambda r: r.map(order), kind="stable").reset_index(drop=True)


def format_optimizer_groups(table: pd.DataFrame, optimizer: str) -> str:
    shown = table.assign(
        parameters=table["parameters"].map("{:,}".format), decay=table["decay"].map({True: "yes", False: "no"})
    )
    return f"optimizer {optimizer}: parameter groups (model/param_groups.py)\n" + shown.to_string(index=False)
