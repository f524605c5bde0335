"""The held-out evaluation's loop: the precision it scores in (recorded), the batch it scores in (derived from the
model and a memory bound, or set), and its set-up made once (andrea_lab.fit.heldout)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from andrea_testing import byte_datamodule
from lightning.pytorch.plugins.precision import MixedPrecision, Precision

from andrea_lab.data.datamodule import AndreaDataModule
from andrea_lab.errors import UsageError
from andrea_lab.fit.eval_batch import eval_batch_size
from andrea_lab.fit.heldout import HeldOutEvaluation
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.transformer import Andrea

#: How far a bf16-autocast score of the same model may be from its float32 score: a third of the 0.03-nat
#: equivalence margin the precision suites declare (experiments/suites/precision_confirm.yaml).
BF16_TOLERANCE = 0.01
TOKENS = 4096


@pytest.fixture(scope="module")
def data(tmp_path_factory, text_corpus) -> AndreaDataModule:
    return byte_datamodule(text_corpus, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def model(data) -> Andrea:
    """A tiny model trained 40 steps, so that its predictions are peaked (where bf16's rounding shows first)."""
    torch.manual_seed(0)
    net = Andrea(AndreaConfig(vocab_size=257, block_size=32, d_model=64, n_layer=2, n_head=2, init_std=0.125))
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    for step, (x, y) in enumerate(data.train_dataloader()):
        logits, _ = net(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 40:
            break
    return net


def _evaluate(data, model, plugin=None, **options):
    trainer = SimpleNamespace(datamodule=data, global_rank=0, world_size=1, precision_plugin=plugin or Precision())
    module = SimpleNamespace(device=torch.device("cpu"), model=model)
    return HeldOutEvaluation(max_tokens=TOKENS, **options).evaluate(trainer, module)


def test_bf16_and_fp32_scores_of_one_model_agree_within_the_stated_tolerance(data, model):
    fp32 = _evaluate(data, model)
    bf16 = _evaluate(data, model, MixedPrecision("bf16-mixed", "cpu"))
    assert (fp32.precision, bf16.precision) == ("float32", "bfloat16 autocast")
    assert fp32.loss < 4.0  # trained: well below the uniform ln(257) = 5.55
    assert bf16.loss != fp32.loss, "the bf16 score was computed in bf16"
    assert abs(bf16.loss - fp32.loss) < BF16_TOLERANCE
    assert abs(bf16.document_loss - fp32.document_loss) < BF16_TOLERANCE
    assert bf16.tokens == fp32.tokens and bf16.windows == fp32.windows


def test_the_batch_is_derived_from_the_model_and_the_bound_and_the_score_does_not_depend_on_it(data, model):
    derived = _evaluate(data, model, memory_mib=2)
    assert derived.batch_size == eval_batch_size(model.config, 4, 2 << 20) > 8  # not the data module's 8
    bf16 = _evaluate(data, model, MixedPrecision("bf16-mixed", "cpu"), memory_mib=2)
    assert bf16.batch_size == eval_batch_size(model.config, 2, 2 << 20) > derived.batch_size
    one = _evaluate(data, model, batch_size=1)
    assert one.batch_size == 1
    assert one.loss == pytest.approx(derived.loss, abs=1e-6) and one.se == pytest.approx(derived.se, abs=1e-6)
    assert one.per_document["tokens"] == derived.per_document["tokens"]


def test_the_evaluation_sets_up_its_windows_once(data, model, monkeypatch):
    calls = []
    real = data.heldout_dataset
    monkeypatch.setattr(data, "heldout_dataset", lambda *args: calls.append(args) or real(*args))
    evaluation = HeldOutEvaluation(max_tokens=TOKENS)
    trainer = SimpleNamespace(datamodule=data, global_rank=0, world_size=1, precision_plugin=Precision())
    module = SimpleNamespace(device=torch.device("cpu"), model=model)
    scores = [evaluation.evaluate(trainer, module).loss for _ in range(3)]
    assert len(calls) == 1 and scores[0] == scores[1] == scores[2]
    HeldOutEvaluation(max_tokens=TOKENS).evaluate(trainer, module)  # another callback: its own set-up
    assert len(calls) == 2


@pytest.mark.parametrize("bad", [0, -4, True])
def test_a_bad_memory_bound_is_one_line(bad):
    with pytest.raises(UsageError, match=f"heldout.memory_mib must be a positive number of MiB or null.*got {bad!r}"):
        HeldOutEvaluation(memory_mib=bad)
