"""Where andrea-lab keeps what it makes once per machine: tokenized corpora (cache.py) and the named
corpora fetched from the package index (named_corpora.py). Its own module so that resolving a corpus
(corpus.py, below cache.py) can find the cache without importing the tokenized cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

CACHE_ENV_VAR = "ANDREA_LAB_CACHE"


def default_cache_root(cache_dir: Optional[str] = None) -> Path:
    """``cache_dir`` if given, else ``$ANDREA_LAB_CACHE``, else ``~/.cache/andrea-lab``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "andrea-lab"
