"""andrea_lab.runs.directory: the one summary.json schema, read back exactly, older files included."""

from __future__ import annotations

import json

import pytest

from andrea_lab.runs.directory import (
    SCHEMA_VERSION,
    SUMMARY_FILE,
    HeldOut,
    RunRecord,
    read_record,
    run_state,
    write_record,
)


def test_a_record_reads_back_equal(tmp_path):
    record = RunRecord(
        status="diverged",
        divergence={"step": 40, "kind": "stuck_at_unigram"},
        lr=3e-3,
        seed=2,
        heldout=HeldOut(2.5, 0.04, 4096, 30, 64, 1_000_000, True, "documents", 0),
        data={"corpus": "stdlib", "python_version": "3.11.7"},
        versions={"torch": "2.13.0"},
    )
    write_record(tmp_path, record)
    again = read_record(tmp_path)
    assert again == record and again.schema == SCHEMA_VERSION
    assert again.diverged and again.divergence_kind == "stuck_at_unigram" and again.divergence_step == 40
    assert run_state(tmp_path) == "diverged"


def test_a_schema_1_file_reads_with_the_new_fields_empty(tmp_path):
    (tmp_path / SUMMARY_FILE).write_text(
        json.dumps(
            {
                "schema": 1,
                "status": "finished",
                "final_val_loss": 2.3,
                "divergence": {"step": None, "kind": None},
                "spike_count": 0,
                "config": {"d_model": 64},
                "a_key_from_the_future": 1,
            }
        )
    )
    record = read_record(tmp_path)
    assert record.schema == 1 and record.final_val_loss == 2.3 and record.heldout is None
    assert record.data == {} and record.versions == {} and record.config == {"d_model": 64}


def test_a_damaged_or_foreign_file_is_no_record(tmp_path):
    (tmp_path / SUMMARY_FILE).write_text('{"status": "fini')
    assert read_record(tmp_path) is None
    (tmp_path / SUMMARY_FILE).write_text(json.dumps({"status": "finished", "heldout": {"loss": "x"}}))
    assert read_record(tmp_path) is None, "a heldout object of the wrong shape is not a record"
    assert read_record(tmp_path / "missing") is None


def test_a_writer_cannot_record_a_status_or_kind_outside_the_schema(tmp_path):
    from andrea_lab.runs.directory import DIVERGENCE_KINDS, STATUSES, RunRecord, write_record

    for status in STATUSES:
        write_record(tmp_path, RunRecord(status=status))
    for kind in DIVERGENCE_KINDS:
        write_record(tmp_path, RunRecord(status="diverged", divergence={"step": 3, "kind": kind}))
    with pytest.raises(ValueError, match="status 'done'"):
        write_record(tmp_path / "other", RunRecord(status="done"))
    with pytest.raises(ValueError, match="kind 'nan'"):
        write_record(tmp_path / "other", RunRecord(status="diverged", divergence={"step": 3, "kind": "nan"}))
    assert not (tmp_path / "other").exists()
