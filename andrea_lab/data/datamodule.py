"""``AndreaDataModule``: corpus in, deterministic batches of token windows out.

``prepare_data`` does the slow, once-only work (resolve the corpus, train
the tokenizer, encode, write the cache); ``setup`` only memory-maps the
cached token files, so every later run starts at once. The tokenizer
travels in the checkpoint through ``state_dict`` so generation needs
nothing but the checkpoint.
"""

from __future__ import annotations

import platform
import warnings
from pathlib import Path
from typing import Any, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.cache import TokenizedCorpus, load_or_build
from andrea_lab.data.checkpoint_state import TOKENIZER_STATE_KEY, data_checkpoint_state
from andrea_lab.data.corpus import STDLIB_CORPORA, Corpus, CorpusError, ResolvedCorpus, TokenCorpus, resolve_corpus
from andrea_lab.data.families import family_names
from andrea_lab.data.heldout import HeldOutDataset, plan_heldout
from andrea_lab.data.settings import DataSettings
from andrea_lab.data.shard_check import check_ids
from andrea_lab.data.split import split_point
from andrea_lab.data.token_file import ConcatenatedTokens, MappedTokens
from andrea_lab.data.tokenizer import TokenizerError
from andrea_lab.data.windows import RandomWindowDataset, SequentialWindowDataset, StepSampler
from andrea_lab.files import sha256_text

Tokens = Union[MappedTokens, ConcatenatedTokens]


class AndreaDataModule(L.LightningDataModule):
    """Batches of ``(x, y)`` token windows from a corpus, reproducible from the seed.

    Args:
        corpus: What to train on: a shard directory written by ``andrea tokenize``
            (or a directory or glob of llm.c ``*train*.bin`` / ``*val*.bin``
            shards), ``stdlib`` (the Python standard library's .py sources), a
            text file, a directory, a glob pattern, JSONL/Parquet record
            files or a Hugging Face datasets directory (tokenized once into
            the cache), or an llm.c token file (``*_train*.bin``; a
            ``*_val*.bin`` beside it is used for validation).
        tokenizer: ``bpe`` (train a byte-level BPE with exactly vocab_size
            ids on the training documents; for a shard directory, its own
            tokenizer.json), ``byte`` (257 ids: bytes and <|endoftext|>;
            needs vocab_size 257), or a path to a tokenizer.json with at most
            vocab_size ids.
        batch_size: Windows per batch.
        block_size: Tokens per window (the model's context length).
        vocab_size: Number of token ids the model has; every id in the data
            must be below it.
        val_fraction: Share of documents (or, for a single document or a
            token file without a val file, of tokens) held out for
            validation; strictly between 0 and 1.
        seed: Seeds the training windows: batch contents depend only on
            (seed, step), for paired comparisons and exact resume.
        samples_per_epoch: Training windows per epoch (rounded down to a
            multiple of batch_size); default: train tokens // block_size.
        max_val_batches: Cap on the in-training validation batches (fixed,
            consecutive windows from the start of the validation tokens);
            null for all. Cheap and fine for curves; the end-of-fit held-out
            evaluation (``heldout.*``, andrea_lab.data.heldout) covers every
            held-out document and is what comparisons use.
        num_workers: DataLoader worker processes (0 loads in the main process).
        cache_dir: Where tokenized corpora are cached; default
            $ANDREA_LAB_CACHE, else ~/.cache/andrea-lab.
        text_field: The JSONL field / Parquet column holding a record's text.
    """

    # Each argument lives once, in the validated ``settings``; these read it under the names the hooks use.
    corpus_spec = property(lambda self: self.settings.corpus, doc="The corpus as given (``data.corpus``).")
    tokenizer_spec = property(lambda self: self.hparams["tokenizer"], doc="The tokenizer as the user spelled it.")
    batch_size = property(lambda self: self.settings.batch_size)
    block_size = property(lambda self: self.settings.block_size)
    vocab_size = property(lambda self: self.settings.vocab_size)
    val_fraction = property(lambda self: self.settings.val_fraction)
    seed = property(lambda self: self.settings.seed)
    samples_per_epoch = property(lambda self: self.settings.samples_per_epoch)
    max_val_batches = property(lambda self: self.settings.max_val_batches)
    num_workers = property(lambda self: self.settings.num_workers)
    cache_dir = property(lambda self: self.settings.cache_dir)
    text_field = property(lambda self: self.settings.text_field)

    def __init__(
        self,
        corpus: str = "stdlib",
        tokenizer: str = "bpe",
        batch_size: int = 16,
        block_size: int = 1024,
        vocab_size: int = 8449,
        val_fraction: float = 0.05,
        seed: int = 1337,
        samples_per_epoch: Optional[int] = None,
        max_val_batches: Optional[int] = 50,
        num_workers: int = 0,
        cache_dir: Optional[str] = None,
        text_field: str = "text",
    ) -> None:
        super().__init__()
        self.settings = DataSettings.of(
            corpus=corpus,
            tokenizer=tokenizer,
            batch_size=batch_size,
            block_size=block_size,
            vocab_size=vocab_size,
            val_fraction=val_fraction,
            seed=seed,
            samples_per_epoch=samples_per_epoch,
            max_val_batches=max_val_batches,
            num_workers=num_workers,
            cache_dir=cache_dir,
            text_field=text_field,
        )
        self.save_hyperparameters()  # Lightning's record of the arguments as given (checkpoints, config.yaml)

        self._corpus: Optional[ResolvedCorpus] = None
        self._entry: Optional[TokenizedCorpus] = None
        self._val_families: Optional[list[str]] = None
        self._tokenizer: Optional[Tokenizer] = None
        self._tokenizer_known = False
        self._train: Optional[Tokens] = None
        self._val: Optional[Tokens] = None

    # ----------------------------------------------------------------- hooks

    def prepare_data(self) -> None:
        """Build (or verify) the tokenized cache; Lightning runs this once per node."""
        self._entry = None
        self._token_corpus()

    def setup(self, stage: Optional[str] = None) -> None:
        """Memory-map the token streams and check they fit the model."""
        if self._train is not None:
            return
        corpus = self._resolved_corpus()
        train, val, how = self._token_file_streams(self._token_corpus())
        summary = how if self._entry is None else _cache_summary(self._entry, len(train) + len(val))
        _check_lengths(corpus, len(train), len(val), self.block_size)
        self._train, self._val = train, val
        rank_zero_info(
            f"data: {corpus.description}; {len(train) + len(val):,} tokens "
            f"({len(train):,} train / {len(val):,} val); {summary}"
        )

    def train_dataloader(self) -> DataLoader:
        """Random windows, micro-batch ``b`` of rank ``r`` a pure function of (seed, b, r).

        Lightning restores a checkpoint before it asks for this loader, so ``trainer.global_step``
        already says how many optimizer steps were taken: the sampler continues from there, which
        makes a resumed run see exactly the batches an uninterrupted one would (mid-epoch too).
        The sampler splits data across ranks itself (``use_distributed_sampler`` must be false).
        """
        train = self._require(self._train)
        count = self.train_samples_per_epoch
        dataset = RandomWindowDataset(train, self.block_size, count, self.seed)
        rank, world_size, epoch, resume_batch = 0, 1, 0, 0
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            rank, world_size, epoch = trainer.global_rank, trainer.world_size, trainer.current_epoch
            resume_batch = trainer.global_step * trainer.accumulate_grad_batches
        sampler = StepSampler(
            self.batch_size,
            count // self.batch_size,
            rank=rank,
            world_size=world_size,
            epoch=epoch,
            resume_batch=resume_batch,
        )
        return self._loader(dataset, sampler=sampler, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        """The same consecutive validation windows every time."""
        val = self._require(self._val)
        cap = None if self.max_val_batches is None else self.max_val_batches * self.batch_size
        dataset = SequentialWindowDataset(val, self.block_size, max_windows=cap)
        return self._loader(dataset, sampler=None, drop_last=False)

    def test_dataloader(self) -> DataLoader:
        """Testing scores the validation windows (there is no separate test split)."""
        return self.val_dataloader()

    def heldout_dataset(self, max_tokens: int, seed: int) -> HeldOutDataset:
        """Windows across all held-out documents (all of them, or a seeded sample of ``max_tokens``),
        each target token tagged with its document: see :mod:`andrea_lab.data.heldout`."""
        val = self._require(self._val)
        plan = plan_heldout(val, self.block_size, self.eot_id, max_tokens=max_tokens, seed=seed)
        return HeldOutDataset(val, plan)

    def val_document_names(self) -> Optional[list[str]]:
        """The held-out documents' names in stream order (a small text corpus's manifest keeps them), else
        None (a shard corpus, or one document split by position: its manifest lists no held-out document,
        while the plan scores that document's tail as one unit, which an empty list could not name)."""
        return self._manifest_strings("val_documents") or None

    def val_document_strata(self) -> Optional[list[str]]:
        """Each held-out document's stratum (andrea_lab.data.strata), in stream order, where the manifest
        keeps them (caches built since strata were recorded), else None."""
        strata = self._manifest_strings("val_strata")
        names = self.val_document_names()
        return strata if strata is not None and names is not None and len(strata) == len(names) else None

    def val_document_families(self) -> Optional[list[str]]:
        """Each held-out document's near-duplicate family (andrea_lab.data.families), in stream order, where the
        documents are known and their texts at hand (a text corpus), else None.

        Found among the held-out documents themselves: the train/held-out split keeps a family whole, so a
        held-out document's kin are all held out. Read by the selection/test split
        (andrea_lab.data.judging_split); computed once per data module from the texts, not kept in the cache's
        manifest, so caches built before it serve as they are."""
        if self._val_families is None:
            names, corpus = self.val_document_names(), self._resolved_corpus()
            if names is None or not isinstance(corpus, Corpus) or corpus.record_files:
                return None
            by_name = dict(zip(corpus.relative_names(), corpus.files))
            if any(name not in by_name for name in names):
                return None  # the corpus changed since the cache was built: no family is trusted
            texts = (by_name[name].read_bytes() for name in names)
            self._val_families = family_names(names, texts, editions=corpus.editions)
        return list(self._val_families)

    def _manifest_strings(self, key: str) -> Optional[list[str]]:
        values = None if self._entry is None else self._entry.manifest.get(key)
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            return None
        return values

    def provenance(self) -> dict[str, Any]:
        """What a run's numbers depend on in the data: the corpus content hash (for ``stdlib`` also the
        Python version whose library it is), the tokenizer's hash, and the split sizes."""
        corpus = self._resolved_corpus()
        tokenizer = self._tokenizer if self._tokenizer_known else None
        tokens = self._token_corpus() if isinstance(corpus, TokenCorpus) or self._entry is not None else None
        train_docs = val_docs = None
        split_settings = (tokens.manifest or {}).get("settings") or {} if tokens is not None else {}
        if tokens is not None and tokens.manifest is not None:  # counts, not names: a shard corpus has millions
            totals = tokens.manifest.get("totals", {})
            train_docs, val_docs = totals.get("train_documents", 0), totals.get("val_documents", 0)
        return {
            "corpus": self.corpus_spec,
            "corpus_description": corpus.description,
            "corpus_sha256": corpus.fingerprint(),
            "corpus_source": corpus.source if isinstance(corpus, Corpus) else None,
            "python_version": platform.python_version() if self.corpus_spec in STDLIB_CORPORA else None,
            "tokenizer": self.tokenizer_spec,
            "tokenizer_sha256": None if tokenizer is None else sha256_text(tokenizer.to_str()),
            "val_fraction": self.val_fraction,
            "train_tokens": None if self._train is None else len(self._train),
            "val_tokens": None if self._val is None else len(self._val),
            "train_documents": train_docs,
            "val_documents": val_docs,
            "split_version": split_settings.get("split_version"),
        }

    # ----------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to decode its model's output: the tokenizer JSON."""
        return data_checkpoint_state(self._tokenizer, self.vocab_size, self.corpus_spec)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the checkpoint's tokenizer.

        If data is already loaded with a different tokenizer, the data's is
        kept (the ids in the batches come from it) and a warning is raised.
        """
        text = state_dict.get(TOKENIZER_STATE_KEY)
        if text is None:
            return
        restored = tokenizers_lib.tokenizer_from_json(text)
        if self._tokenizer is not None and self._tokenizer.to_str() != text:
            warnings.warn(
                "the checkpoint's tokenizer differs from the tokenizer of the current data; "
                "the data's tokenizer is kept (the token ids in the batches come from it)",
                stacklevel=2,
            )
            return
        self._set_tokenizer(restored)

    # ------------------------------------------------------------ properties

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        """The HF tokenizer of the data (None for a token-file corpus given no tokenizer)."""
        if not self._tokenizer_known:
            raise RuntimeError("the tokenizer is not known yet: call prepare_data() and setup(), or load_state_dict()")
        return self._tokenizer

    @property
    def eot_id(self) -> Optional[int]:
        """Id of <|endoftext|>, which separates documents in the token streams."""
        tokenizer = self.tokenizer
        return None if tokenizer is None else tokenizers_lib.eot_id(tokenizer)

    @property
    def train_token_stream(self) -> Tokens:
        """The training tokens themselves (memory-mapped), e.g. for the unigram entropy of the data."""
        return self._require(self._train)

    @property
    def train_tokens(self) -> int:
        """Number of training tokens (after setup)."""
        return len(self._require(self._train))

    @property
    def val_tokens(self) -> int:
        """Number of validation tokens (after setup)."""
        return len(self._require(self._val))

    @property
    def train_samples_per_epoch(self) -> int:
        """Windows per epoch: a multiple of batch_size, so step s uses samples s*B .. s*B+B-1."""
        requested = self.samples_per_epoch
        if requested is None:
            requested = self.train_tokens // self.block_size
        return max(self.batch_size, requested // self.batch_size * self.batch_size)

    @property
    def cache_entry(self) -> Optional[TokenizedCorpus]:
        """The tokenized cache entry in use (None for token-file corpora)."""
        return self._entry

    # --------------------------------------------------------------- helpers

    def _resolved_corpus(self) -> ResolvedCorpus:
        if self._corpus is None:
            self._corpus = resolve_corpus(self.corpus_spec, text_field=self.text_field, cache_dir=self.cache_dir)
        return self._corpus

    def _token_corpus(self) -> TokenCorpus:
        """What the data module reads: the corpus itself when it is tokens, else its cache entry (text of
        any kind goes through the one tokenize pipeline into it; built or verified on first use)."""
        corpus = self._resolved_corpus()
        if isinstance(corpus, TokenCorpus):
            return corpus
        if self._entry is None:
            self._entry = load_or_build(
                corpus, self.settings.tokenizer, self.vocab_size, self.val_fraction, self.cache_dir, self.seed
            )
        return self._entry.tokens

    def _set_tokenizer(self, tokenizer: Optional[Tokenizer]) -> None:
        self._tokenizer = tokenizer
        self._tokenizer_known = True

    def _token_file_streams(self, corpus: TokenCorpus) -> tuple[Tokens, Tokens, str]:
        """Train/val streams of a pre-tokenized corpus, after checking ids against vocab_size up front."""
        train_files, val_files = corpus.train, corpus.val
        if len(train_files) == 1 and not val_files:
            total = len(MappedTokens(train_files[0]))
            boundary = split_point(total, self.val_fraction)
            train, val = MappedTokens(train_files[0], 0, boundary), MappedTokens(train_files[0], boundary, total)
            how = f"validation is the last {self.val_fraction:.1%} of tokens"
        elif not val_files:
            raise CorpusError(
                f"corpus {corpus.description} has no validation shard (*val*.bin); "
                "`andrea tokenize` writes one, llm.c names its first shard *_val_000000.bin"
            )
        else:
            train, val = _stream(train_files), _stream(val_files)
            how = f"validation from {', '.join(path.name for path in val_files[:3])}" + (
                ", ..." if len(val_files) > 3 else ""
            )
        check_ids([*train_files, *val_files], self.vocab_size)  # on the ids themselves, not the manifest's word
        self._set_tokenizer(self._token_file_tokenizer(corpus))
        return train, val, how

    def _token_file_tokenizer(self, corpus: TokenCorpus) -> Optional[Tokenizer]:
        """A shard directory's own tokenizer.json; a token file carries none: use 'byte' or a given file,
        else none (with a warning)."""
        try:
            tokenizer = self.settings.tokenizer.for_tokens(corpus.own_tokenizer, corpus.own_tokenizer_sha256)
        except TokenizerError as error:
            raise CorpusError(str(error)) from None
        if tokenizer is None:
            rank_zero_warn(
                "the corpus is pre-tokenized, so no BPE can be trained on its text; checkpoints will carry no "
                "tokenizer. Pass data.tokenizer=<path to the tokenizer.json that made the token file> to decode."
            )
        return tokenizer

    def _loader(self, dataset: Any, sampler: Optional[StepSampler], drop_last: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            shuffle=False,
            drop_last=drop_last,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
            # Its own generator: creating an iterator must not draw from the global torch RNG, or a
            # resumed run (which creates one more iterator) would see different dropout masks.
            generator=torch.Generator().manual_seed(self.seed),
        )

    @staticmethod
    def _require(stream: Optional[Tokens]) -> Tokens:
        if stream is None:
            raise RuntimeError("the data is not loaded yet: call prepare_data() and setup() first")
        return stream


def _check_lengths(corpus: ResolvedCorpus, train_tokens: int, val_tokens: int, block_size: int) -> None:
    needed = block_size + 1
    if train_tokens < needed or val_tokens < needed:
        raise CorpusError(
            f"corpus {corpus.description} has {train_tokens:,} train and {val_tokens:,} val tokens, but "
            f"block_size {block_size} needs at least {needed} in each; use a larger corpus, a smaller "
            "block_size, or a different val_fraction"
        )


def _cache_summary(entry: TokenizedCorpus, tokens: int) -> str:
    manifest = entry.manifest
    corpus_bytes = manifest["corpus_bytes"]
    how = f"cache hit in {entry.seconds:.2f} s" if entry.hit else f"built in {entry.seconds:.1f} s"
    return (
        f"{corpus_bytes / 1e6:.2f} MB of text, "
        f"{corpus_bytes / max(tokens, 1):.2f} bytes/token; {how} ({entry.directory})"
    )


def _stream(paths: list[Path]) -> Tokens:
    """One shard as itself; several as one concatenated stream."""
    return MappedTokens(paths[0]) if len(paths) == 1 else ConcatenatedTokens([MappedTokens(path) for path in paths])
