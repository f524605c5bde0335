"""AndreaDataModule end to end on a small generated corpus (vocab 300, block 32)."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from andrea_lab.data import AndreaDataModule, CorpusError, DataConfigError, write_token_file
from andrea_lab.data.tokenizer import END_OF_TEXT, byte_tokenizer, save_tokenizer
from andrea_lab.runs.checkpoint_io import stored_tokenizer

VOCAB, BLOCK, BATCH = 300, 32, 4


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import random

    directory = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "alpha beta gamma delta return value model token über 東京 🙂 self index".split()
    for index in range(16):
        text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(30))
        (directory / f"doc_{index:02d}.txt").write_text(f"# doc {index}\n{text}\n", encoding="utf-8")
    return directory


def make_dm(corpus: Path | str, cache: Path, **overrides) -> AndreaDataModule:
    settings = dict(
        corpus=str(corpus),
        batch_size=BATCH,
        block_size=BLOCK,
        vocab_size=VOCAB,
        val_fraction=0.25,
        cache_dir=str(cache),
    )
    settings.update(overrides)
    return AndreaDataModule(**settings)


@pytest.fixture(scope="module")
def dm(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> AndreaDataModule:
    module = make_dm(corpus_dir, tmp_path_factory.mktemp("cache"))
    module.prepare_data()
    module.setup("fit")
    return module


def test_train_batches_have_the_right_shape_dtype_and_shift(dm: AndreaDataModule) -> None:
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (BATCH, BLOCK) and y.shape == (BATCH, BLOCK)
    assert x.dtype == torch.int64 and y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < VOCAB and int(x.min()) >= 0


def test_val_batches_are_fixed_consecutive_windows(dm: AndreaDataModule) -> None:
    first = [x for x, _ in dm.val_dataloader()]
    second = [x for x, _ in dm.test_dataloader()]
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert first[0].shape == (BATCH, BLOCK)
    assert len(dm.val_dataloader().dataset) == (dm.val_tokens - 1) // BLOCK


def test_val_batches_are_capped(corpus_dir: Path, tmp_path: Path) -> None:
    module = make_dm(corpus_dir, tmp_path, max_val_batches=1)
    module.prepare_data()
    module.setup("fit")
    assert len(module.val_dataloader()) == 1


def test_split_is_by_document_disjoint_and_deterministic(
    dm: AndreaDataModule, corpus_dir: Path, tmp_path: Path
) -> None:
    manifest = dm.cache_entry.manifest
    train_docs, val_docs = set(manifest["train_documents"]), set(manifest["val_documents"])
    assert train_docs and val_docs and not train_docs & val_docs
    assert train_docs | val_docs == {p.name for p in corpus_dir.iterdir()}

    other = make_dm(corpus_dir, tmp_path / "other-cache")
    other.prepare_data()
    assert other.cache_entry.manifest["val_documents"] == manifest["val_documents"]

    # The text of each validation document is in the validation stream and not in the training one.
    tokenizer = dm.tokenizer
    val_text = tokenizer.decode(dm._val[0 : len(dm._val)].tolist())
    train_text = tokenizer.decode(dm._train[0 : len(dm._train)].tolist())
    for name in val_docs:
        heading = (corpus_dir / name).read_text(encoding="utf-8").splitlines()[0] + "\n"
        assert heading in val_text and heading not in train_text


def test_a_tiny_corpus_still_gets_one_validation_document(tmp_path: Path) -> None:
    """Two documents and a val_fraction whose hash rule would hold out neither: one goes to validation."""
    for name, word in (("a.txt", "alpha "), ("b.txt", "beta ")):
        (tmp_path / "tiny" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "tiny" / name).write_text(word * 200, encoding="utf-8")
    module = make_dm(tmp_path / "tiny", tmp_path / "cache", tokenizer="byte", vocab_size=257, val_fraction=0.001)
    module.prepare_data()
    module.setup("fit")
    manifest = module.cache_entry.manifest
    assert len(manifest["train_documents"]) == 1 and len(manifest["val_documents"]) == 1
    from andrea_lab.data.split import name_score

    held_out = min(("a.txt", "b.txt"), key=name_score)  # the rule: the lowest-scoring document goes to validation
    assert manifest["val_documents"] == [held_out] and module.provenance()["val_documents"] == 1
    assert module.val_tokens == len((tmp_path / "tiny" / held_out).read_bytes())


def test_training_data_depends_only_on_seed_and_step(corpus_dir: Path, dm: AndreaDataModule, tmp_path: Path) -> None:
    same = make_dm(corpus_dir, tmp_path)
    same.prepare_data()
    same.setup("fit")
    a, b = next(iter(dm.train_dataloader()))[0], next(iter(same.train_dataloader()))[0]
    assert torch.equal(a, b)

    other_seed = make_dm(corpus_dir, tmp_path, seed=7)
    other_seed.setup("fit")  # setup alone loads the (already built) cache
    assert not torch.equal(a, next(iter(other_seed.train_dataloader()))[0])

    loader = dm.train_dataloader()
    loader.sampler.set_epoch(1)
    assert not torch.equal(a, next(iter(loader))[0])


def test_workers_give_the_same_batches(dm: AndreaDataModule, corpus_dir: Path, tmp_path: Path) -> None:
    with_workers = make_dm(corpus_dir, tmp_path, num_workers=1)
    with_workers.setup("fit")
    loader = with_workers.train_dataloader()
    assert loader.persistent_workers and loader.num_workers == 1
    assert torch.equal(next(iter(loader))[0], next(iter(dm.train_dataloader()))[0])
    # Stop the persistent worker now: left to the cyclic GC, torch waits out a 5 s join timeout.
    loader._iterator._shutdown_workers()


def test_samples_per_epoch_default_and_rounding(dm: AndreaDataModule, corpus_dir: Path, tmp_path: Path) -> None:
    expected = dm.train_tokens // BLOCK // BATCH * BATCH
    assert dm.train_samples_per_epoch == expected
    assert len(dm.train_dataloader()) == expected // BATCH
    explicit = make_dm(corpus_dir, tmp_path, samples_per_epoch=10)
    explicit.setup("fit")
    assert explicit.train_samples_per_epoch == 8
    assert len(explicit.train_dataloader()) == 2


def test_properties_and_logging(corpus_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    module = make_dm(corpus_dir, tmp_path)
    with pytest.raises(RuntimeError, match="not known yet"):
        _ = module.tokenizer
    with pytest.raises(RuntimeError, match="not loaded yet"):
        _ = module.train_tokens
    with caplog.at_level(logging.INFO):
        module.prepare_data()
        module.setup("fit")
    assert module.eot_id == VOCAB - 1
    assert module.tokenizer.get_vocab_size() == VOCAB
    assert module.train_tokens > 0 and module.val_tokens > 0
    line = next(record.getMessage() for record in caplog.records if record.getMessage().startswith("data:"))
    assert "16 files" in line and "MB of text" in line and "bytes/token" in line and "built in" in line

    caplog.clear()
    again = make_dm(corpus_dir, tmp_path)
    with caplog.at_level(logging.INFO):
        again.prepare_data()
        again.setup("fit")
    assert any("cache hit" in record.getMessage() for record in caplog.records)


def test_state_dict_carries_the_tokenizer(dm: AndreaDataModule, corpus_dir: Path, tmp_path: Path) -> None:
    state = dm.state_dict()
    assert state["tokenizer_json"] == dm.tokenizer.to_str() and state["eot_id"] == VOCAB - 1

    fresh = make_dm(corpus_dir, tmp_path)
    fresh.load_state_dict(state)
    assert fresh.tokenizer.to_str() == dm.tokenizer.to_str()
    assert fresh.tokenizer.encode(END_OF_TEXT).ids != [VOCAB - 1]  # runtime settings restored too
    restored = stored_tokenizer({"AndreaDataModule": state})
    assert restored.decode(restored.encode("über 東京").ids) == "über 東京"
    assert stored_tokenizer({}) is None

    with pytest.warns(UserWarning, match="tokenizer differs"):
        dm.load_state_dict({"tokenizer_json": byte_tokenizer().to_str()})
    assert dm.tokenizer.get_vocab_size() == VOCAB


def test_byte_tokenizer_needs_vocab_257(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(DataConfigError) as caught:
        make_dm(corpus_dir, tmp_path, tokenizer="byte", vocab_size=300)
    assert str(caught.value) == ("tokenizer 'byte' has 257 ids but vocab_size is 300; set model.config.vocab_size: 257")
    module = make_dm(corpus_dir, tmp_path, tokenizer="byte", vocab_size=257)
    module.prepare_data()
    module.setup("fit")
    x, _ = next(iter(module.train_dataloader()))
    assert int(x.max()) < 257 and module.eot_id == 256


def test_tokenizer_file_must_fit_vocab(dm: AndreaDataModule, corpus_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "tok.json"
    save_tokenizer(dm.tokenizer, path)
    with pytest.raises(DataConfigError, match=r"has 300 ids but vocab_size is only 280"):
        make_dm(corpus_dir, tmp_path, tokenizer=str(path), vocab_size=280)
    module = make_dm(corpus_dir, tmp_path, tokenizer=str(path), vocab_size=320)
    module.prepare_data()
    module.setup("fit")
    assert module.tokenizer.to_str() == dm.tokenizer.to_str()
    with pytest.raises(DataConfigError, match="not 'bpe', 'byte', or an existing tokenizer.json"):
        make_dm(corpus_dir, tmp_path, tokenizer=str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        ({"val_fraction": 0.0}, "val_fraction"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"block_size": -1}, "block_size"),
        ({"seed": -3}, "seed"),
        ({"samples_per_epoch": 2}, "samples_per_epoch"),
        ({"max_val_batches": 0}, "max_val_batches"),
        ({"vocab_size": 100}, "vocab_size between 257"),
        ({"vocab_size": 70000}, "vocab_size between 257"),
    ],
)
def test_invalid_settings_fail_at_construction(tmp_path: Path, overrides: dict, pattern: str) -> None:
    with pytest.raises(DataConfigError, match=pattern):
        make_dm("stdlib", tmp_path, **overrides)


def test_corpus_too_small_for_block_size(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("tiny document " * 20)
    (tmp_path / "c" / "b.txt").write_text("another one")
    module = make_dm(tmp_path / "c", tmp_path / "cache", tokenizer="byte", vocab_size=257, block_size=64)
    module.prepare_data()
    with pytest.raises(CorpusError, match=r"val tokens, but block_size 64 needs at least 65 in each"):
        module.setup("fit")


def test_missing_corpus_is_reported_on_prepare(tmp_path: Path) -> None:
    module = make_dm(tmp_path / "nope", tmp_path)
    with pytest.raises(CorpusError, match="does not exist"):
        module.prepare_data()


def test_token_file_with_ids_beyond_vocab_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "shard.bin"
    tokens = np.arange(2000) % 256
    tokens[1500] = 300
    write_token_file(path, tokens)
    module = make_dm(path, tmp_path, tokenizer="byte", vocab_size=257)
    module.prepare_data()
    with pytest.raises(CorpusError) as caught:
        module.setup("fit")
    message = str(caught.value)
    assert "token id 300" in message and "vocab_size is 257" in message and str(path) in message


def test_token_file_split_and_val_sibling(tmp_path: Path) -> None:
    train_path = tmp_path / "tiny_train.bin"
    write_token_file(train_path, np.arange(1000) % 256)
    module = make_dm(train_path, tmp_path, tokenizer="byte", vocab_size=257, val_fraction=0.1)
    module.setup("fit")
    assert (module.train_tokens, module.val_tokens) == (900, 100)
    assert module.tokenizer.get_vocab_size() == 257
    assert module.cache_entry is None

    write_token_file(tmp_path / "tiny_val.bin", np.arange(77) % 256)
    sibling = make_dm(train_path, tmp_path, tokenizer="byte", vocab_size=257)
    sibling.setup("fit")
    assert (sibling.train_tokens, sibling.val_tokens) == (1000, 77)


def test_token_file_without_tokenizer_warns(tmp_path: Path) -> None:
    path = tmp_path / "shard.bin"
    write_token_file(path, np.arange(1000) % 299)
    module = make_dm(path, tmp_path)
    with pytest.warns(UserWarning, match="pre-tokenized"):
        module.setup("fit")
    assert module.tokenizer is None and module.eot_id is None
    assert module.state_dict()["tokenizer_json"] is None


class _TinyLM(L.LightningModule):
    """Records the batches it is given, so the test can check what Lightning fed it."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)
        self.seen: list[tuple[int, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append((self.current_epoch, x.clone()))
        logits = self.head(self.embedding(x))
        return F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.head(self.embedding(x)).view(-1, VOCAB), y.view(-1)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path: Path, max_epochs: int) -> L.Trainer:
    return L.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        default_root_dir=tmp_path,
    )


def test_lightning_fit_sets_epochs_checkpoints_tokenizer_and_resumes_exactly(corpus_dir: Path, tmp_path: Path) -> None:
    reference = make_dm(corpus_dir, tmp_path, samples_per_epoch=8, max_val_batches=1)
    reference.setup("fit")
    dataset = reference.train_dataloader().dataset

    def expected(step: int) -> torch.Tensor:
        return torch.stack([dataset[i][0] for i in range(step * BATCH, step * BATCH + BATCH)])

    model = _TinyLM()
    module = make_dm(corpus_dir, tmp_path, samples_per_epoch=8, max_val_batches=1)
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(model, datamodule=module)
    assert [epoch for epoch, _ in model.seen] == [0, 0, 1, 1]
    for step, (_, x) in enumerate(model.seen):
        assert torch.equal(x, expected(step)), f"step {step}"

    checkpoint_path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(checkpoint_path)
    checkpoint = torch.load(checkpoint_path, weights_only=False)
    assert checkpoint["AndreaDataModule"]["tokenizer_json"] == module.tokenizer.to_str()

    resumed_model = _TinyLM()
    resumed = make_dm(corpus_dir, tmp_path, samples_per_epoch=8, max_val_batches=1)
    _trainer(tmp_path, max_epochs=3).fit(resumed_model, datamodule=resumed, ckpt_path=checkpoint_path)
    assert [epoch for epoch, _ in resumed_model.seen] == [2, 2]
    for offset, (_, x) in enumerate(resumed_model.seen):
        assert torch.equal(x, expected(4 + offset))
