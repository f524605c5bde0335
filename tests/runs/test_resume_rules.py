"""What a resumed fit may change: unset plugin options (``null`` on the command line, ``{}`` in the
checkpoint) are the same setting; a changed option or learning rate is refused by name."""

from __future__ import annotations

import pytest

from andrea_lab.runs.resume_rules import MAY_CHANGE, ResumeOverrideError, check_resume

SAVED = {"hyper_parameters": {"lr": 1e-3, "optimizer_args": {}, "schedule_args": {}, "compile": False}}


def test_unset_plugin_options_continue_the_run():
    check_resume("x.ckpt", SAVED, {"lr": 1e-3, "optimizer_args": None, "schedule_args": {}, "compile": True}, {})
    assert "model.compile" in MAY_CHANGE


@pytest.mark.parametrize(
    "changed, named",
    [
        ({"optimizer_args": {"momentum": 0.9}}, "model.optimizer_args (checkpoint {}, now {'momentum': 0.9})"),
        ({"lr": 2e-3}, "model.lr (checkpoint 0.001, now 0.002)"),
    ],
)
def test_a_changed_setting_is_refused_by_name(changed, named):
    current = {"lr": 1e-3, "optimizer_args": None, "schedule_args": None, **changed}
    with pytest.raises(ResumeOverrideError, match="continues a run") as refused:
        check_resume("x.ckpt", SAVED, current, {})
    assert named in str(refused.value)
