"""The documented entry point of the throughput benchmark (docs/performance.md): ``python
benchmarks/throughput.py --preset andrea-tiny ...``. The code is the package beside this file,
benchmarks/throughput/ (run as a script, this directory is first on ``sys.path``, and a package
directory is found before a module of the same name)."""

import sys

from throughput.cli import main

if __name__ == "__main__":
    sys.exit(main())
