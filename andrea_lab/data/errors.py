"""The data package's error for a corpus that cannot be used, in a module of its own.

Both sides of a corpus raise it: the sources (corpus.py) and the token files and shards (shards.py,
shard_check.py). Defined here, below both, it lets neither import the other for it.
"""

from andrea_lab.errors import UsageError


class CorpusError(UsageError):
    """The corpus spec does not name usable training text."""
