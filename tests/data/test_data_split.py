"""Train/val split: by document name hash, stable, never leaving a side empty."""

from __future__ import annotations

import pytest

from andrea_lab.data.split import name_score, split_documents, split_point


def test_split_is_stable_when_documents_are_added() -> None:
    names = [f"doc_{i}.py" for i in range(200)]
    train, val = split_documents(names, 0.1)
    assert sorted(train + val) == list(range(200))
    assert 5 < len(val) < 40
    bigger = names + [f"new_{i}.py" for i in range(50)]
    _, val_after = split_documents(bigger, 0.1)
    assert {names[i] for i in val} == {bigger[i] for i in val_after if i < 200}


def test_both_sides_get_a_document() -> None:
    train, val = split_documents(["a", "b"], 0.001)
    assert len(train) == 1 and len(val) == 1
    train, val = split_documents(["a", "b"], 0.999)
    assert len(train) == 1 and len(val) == 1
    assert val == [min(range(2), key=lambda i: name_score("ab"[i]))]


def test_scores_are_uniform_enough() -> None:
    scores = [name_score(f"file{i}") for i in range(2000)]
    assert all(0 <= s < 1 for s in scores)
    assert 0.45 < sum(scores) / len(scores) < 0.55


def test_split_point_takes_the_tail() -> None:
    assert split_point(100, 0.2) == 80
    assert split_point(10, 0.05) == 10  # rounds to no val tokens; callers check lengths


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_bad_fractions(fraction: float) -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        split_documents(["a", "b"], fraction)


def test_one_document_cannot_be_split_by_document() -> None:
    with pytest.raises(ValueError, match="at least 2 documents"):
        split_documents(["only"], 0.5)
