"""The held-out documents split again, by family: a *selection* part that chooses and a *test* part that judges.

A comparison that picks each variant's learning rate (or any tuned setting, or an early stop) on the held-out
score and then reports the difference on that same score favours whatever the choice happened to fit: the
documents that chose are the documents that judge. So the held-out documents are divided once more, into a
selection part (every choice reads it) and a test part (only the final verdicts read it), and a comparison says
which part judged it (andrea_lab.experiments.compare).

The division hashes each document's near-duplicate *family* (andrea_lab.data.families), never its own name, so
two editions of a play or two copies of a module are never one on each side: a test document whose near-copy
chose the LR would be no test. The hash is salted, so it is independent of the train/held-out split
(andrea_lab.data.split hashes the same family names unsalted: without the salt, every held-out family scores
below ``val_fraction`` and would crowd into one part). About half of the families go each way; with two or more
families both parts get at least one.
"""

from __future__ import annotations

from typing import Sequence

from andrea_lab.data.split import name_score

SELECTION, TEST = "selection", "test"
PARTS = (SELECTION, TEST)
#: Part of the hashed text: changing it moves documents between the parts, so it is versioned.
SALT = "andrea-lab selection/test split, version 1: "
#: The share of families that go to the test part.
TEST_SHARE = 0.5


def part_score(family: str) -> float:
    """A stable number in [0, 1) for a family, independent of the train/held-out split's."""
    return name_score(SALT + family)


def judging_parts(families: Sequence[str]) -> list[str]:
    """Each held-out document's part (``selection`` or ``test``), from its family's name, in the given order.

    A family goes to ``test`` when :func:`part_score` is below :data:`TEST_SHARE`. With two or more families
    and all of them on one side, the family nearest the boundary crosses it, so each part has a document."""
    families = [str(family) for family in families]
    if any(not family for family in families):
        raise ValueError("every held-out document needs a family name (got an empty one)")
    scores = {family: part_score(family) for family in families}
    in_test = {family: score < TEST_SHARE for family, score in scores.items()}
    if len(scores) >= 2 and len(set(in_test.values())) == 1:
        nearest = min(scores, key=lambda family: (abs(scores[family] - TEST_SHARE), family))
        in_test[nearest] = not in_test[nearest]
    return [TEST if in_test[family] else SELECTION for family in families]
