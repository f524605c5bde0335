"""andrea-lab's own subcommands (`andrea params`, `andrea generate`, ...): one module each, ``main(argv) -> int``."""
