"""A published result cited with what it measured, and "agrees" only on the same kind of quantity."""

from __future__ import annotations

import pytest

from andrea_lab.experiments.compare.claim_spec import parse_claims
from andrea_lab.experiments.compare.published import (
    FIELDS,
    NOT_STATED,
    QUANTITIES,
    Published,
    agreement,
    parse_published,
)
from andrea_lab.experiments.compare.published_results import PUBLISHED

XIONG = PUBLISHED["xiong2020_post_ln_nowarmup_fails"]
FULL = {
    "source": "Someone 2024",
    "result": "B blows up where A does not",
    "quantity": "blew_up",
    "model": "a 1B decoder",
    "tokens": NOT_STATED,
    "metric": "non-finite loss",
}


def test_a_claim_cites_a_known_result_by_its_key_or_a_mapping_of_its_fields():
    by_key = parse_claims([{"fewer_blowups": ["a", "b"], "published": "xiong2020_post_ln_nowarmup_fails"}])[0]
    assert by_key.published is XIONG and XIONG.quantity == "loss"
    inline = parse_claims([{"fewer_blowups": ["a", "b"], "published": FULL}])[0]
    assert inline.published == Published(**FULL)
    assert parse_claims([{"lower_loss": ["a", "b"]}])[0].published is None


@pytest.mark.parametrize(
    "value, why",
    [
        ("Xiong et al. 2020: Post-LN fails", "is not a known published result; use one of"),
        ({**FULL, "quantity": "diverged"}, "quantity 'diverged' is not one of loss, stuck"),
        ({key: FULL[key] for key in FIELDS[:-1]}, "mapping of exactly source, result, quantity"),
        ({**FULL, "model": " "}, "non-empty text"),
        ({**FULL, "tokens": 5}, "non-empty text"),
        (["xiong"], "mapping of exactly"),
    ],
)
def test_free_text_an_unknown_quantity_or_a_missing_field_is_refused_in_one_line(value, why):
    with pytest.raises(ValueError, match=why) as refused:
        parse_claims([{"lower_loss": ["a", "b"], "published": value}])
    assert "\n" not in str(refused.value)


def test_every_listed_result_names_a_known_quantity_and_every_field():
    for key, published in PUBLISHED.items():
        assert published.quantity in QUANTITIES, key
        assert all(getattr(published, name).strip() for name in FIELDS), key
        assert parse_published(key, PUBLISHED) is published


def test_agrees_only_on_the_same_kind_of_quantity():
    blowups = Published(**FULL)
    assert agreement(blowups, "blew_up", "reproduced") == "agrees"
    assert agreement(blowups, "blew_up", "contradicted") == "disagrees"
    assert agreement(blowups, "blew_up", "not detected") == "not detected here"
    # the committed case: the paper's worse end result, this proxy's runs stuck on the plateau
    assert agreement(XIONG, "stuck", "reproduced") == "different quantity (paper: loss; ours: stuck)"
    assert agreement(XIONG, "loss vs plateau", "reproduced").startswith("different quantity")
    assert agreement(XIONG, "loss", "too few seeds (n=2) — lead only") == "not judged here"
    assert agreement(None, "loss", "reproduced") == ""


def test_the_description_says_what_the_paper_measured_and_not_stated_as_such():
    text = PUBLISHED["shazeer2020_swiglu_gelu"].describe()
    assert text.startswith("Shazeer 2020, Table 1: SwiGLU 1.944 vs GELU 1.983")
    assert "measured: loss on T5-base" in text and "65,536 steps" in text and "log-perplexity" in text
    assert "tokens not stated" in XIONG.describe()
