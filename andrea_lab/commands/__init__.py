"""What ``andrea`` runs: its own subcommands (`andrea params`, `andrea generate`, ...: one module each,
``main(argv) -> int``), the LightningCLI behind ``fit``/``validate``/``test`` (:mod:`.lightning_cli`), and the
third-party noise filtered at the entry point (:mod:`.quiet`). andrea_lab/cli.py dispatches to them."""
