"""Periodic progress lines for a long loop over held-out windows (the held-out evaluation, the logit lens):
a line when it starts, then one every 10 s and one at the end, so minutes of work are never silent. Plain
Python: the lens and compare import it without Lightning."""

from __future__ import annotations

import sys
import time
from typing import Callable


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


#: Seconds between two progress lines.
PROGRESS_EVERY_S = 10.0


class Progress:
    """Periodic lines for a long loop, ``held-out evaluation: 40/120 batches (33 %), 12 s``; ``say`` writes
    them (stderr, or rank 0's log in a fit)."""

    def __init__(
        self,
        total: int,
        what: str,
        every_s: float = PROGRESS_EVERY_S,
        clock=time.monotonic,
        say: Callable[[str], None] = to_stderr,
    ):
        self.total, self.what, self.every_s, self.clock, self.say = total, what, every_s, clock, say
        self.started = self.last = self.clock()
        self.say(f"{self.what}: {self.total} batches ...")

    def step(self, done: int) -> None:
        now = self.clock()
        if now - self.last >= self.every_s or done == self.total:
            self.last = now
            self.say(
                f"{self.what}: {done}/{self.total} batches ({100 * done // max(self.total, 1)} %), "
                f"{now - self.started:.0f} s"
            )
