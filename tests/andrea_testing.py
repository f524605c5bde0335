"""Constants shared by the end-to-end tests (a module with a unique name, unlike conftest)."""

#: Overrides that turn experiments/quickstart.yaml into a seconds-long CPU run on a small corpus.
MICRO_OVERRIDES = [
    "--model.config.vocab_size", "257", "--data.tokenizer", "byte",
    "--model.config.d_model", "64", "--model.config.n_layer", "2", "--model.config.n_head", "2",
    "--model.config.block_size", "64", "--data.batch_size", "8",
    "--trainer.limit_val_batches", "2", "--trainer.num_sanity_val_steps", "2",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
]
