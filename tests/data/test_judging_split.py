"""The held-out documents' selection/test split: by family, stable, independent of the train/held-out split."""

from __future__ import annotations

import pytest

from andrea_lab.data.judging_split import SELECTION, TEST, judging_parts, part_score
from andrea_lab.data.split import name_score


def test_a_family_is_never_on_both_sides_and_the_parts_do_not_depend_on_the_order() -> None:
    families = [f"family{i % 40}.py" for i in range(200)]  # five documents per family
    parts = judging_parts(families)
    by_family = {}
    for family, part in zip(families, parts):
        by_family.setdefault(family, set()).add(part)
    assert all(len(sides) == 1 for sides in by_family.values())
    assert set(parts) == {SELECTION, TEST}
    reordered = list(reversed(families))
    assert judging_parts(reordered) == list(reversed(parts))


def test_about_half_of_the_families_each_way_even_among_those_the_train_split_held_out() -> None:
    """Unsalted, the held-out families (name_score < val_fraction) would all hash below one half: one part."""
    names = [f"module_{i}.py" for i in range(20000)]
    held_out = [name for name in names if name_score(name) < 0.1]
    share = judging_parts(held_out).count(TEST) / len(held_out)
    assert 0.45 < share < 0.55, share
    assert abs(sum(part_score(name) < 0.5 for name in names) / len(names) - 0.5) < 0.02


def test_two_families_always_give_each_part_one_and_one_family_cannot() -> None:
    for first in range(50):  # pairs whose hashes fall on one side are moved apart
        parts = judging_parts([f"a{first}", f"b{first}", f"a{first}"])
        assert set(parts) == {SELECTION, TEST} and parts[0] == parts[2]
    assert len(set(judging_parts(["only.py", "only.py"]))) == 1


def test_a_document_without_a_family_name_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a family name"):
        judging_parts(["a.py", ""])
