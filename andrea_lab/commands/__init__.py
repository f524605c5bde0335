"""What ``andrea`` runs: its own subcommands (`andrea params`, `andrea generate`, ...: one module each,
``main(argv) -> int``) and the third-party noise filtered at the entry point (:mod:`.quiet`). ``fit``,
``validate`` and ``test`` are the LightningCLI of one run (andrea_lab.fit.cli). andrea_lab/cli.py dispatches."""
