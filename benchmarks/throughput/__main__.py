"""``python -m benchmarks.throughput``: the same as ``python benchmarks/throughput.py``."""

import sys

from .cli import main

sys.exit(main())
