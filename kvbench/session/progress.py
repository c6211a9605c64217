"""Progress of one run: requests done, tokens/s, KV use, time left.

On a terminal a tqdm bar (with its ETA) that clears itself when the run ends. Off a terminal
(a CI log, a file) a bar of carriage returns would be unreadable, so plain lines instead: the
first after `PLAIN_FIRST_S`, then one every `PLAIN_EVERY_S` or at each further tenth of the
requests, whichever comes first. Runs shorter than the first interval print nothing.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

PLAIN_FIRST_S = 10.0
PLAIN_EVERY_S = 10.0
PLAIN_MIN_GAP_S = 1.0  # tenths of a fast run come no closer than this
BAR_DELAY_S = 1.0  # a bar only for runs longer than this
BAR_EVERY_S = 0.1  # the bar's figures at most this often (tqdm redraws at most every 0.2 s)


class Progress:
    def __init__(self, total: int, label: str, enabled: bool, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.clock = clock
        self.started = clock()
        self.on_terminal = _isatty(self.stream)
        self.enabled = enabled
        self._bar: tqdm | None = None
        if enabled and self.on_terminal:
            from tqdm import tqdm  # (only for a bar: off a terminal and `--quiet` need none)

            self._bar = tqdm(total=self.total, desc=label, unit="req", file=self.stream,
                             delay=BAR_DELAY_S, mininterval=0.2, leave=False,
                             dynamic_ncols=True)
        self._last_line_s: float | None = None
        self._last_tenth = 0
        self._bar_updated_s = -math.inf

    def due(self, done: int) -> bool:
        """Whether `update` now, with `done` requests done, could change what is shown. A
        caller whose figures cost something to gather asks first: a simulation's loop comes
        round tens of thousands of times a second, and the bar redraws five times."""
        if not self.enabled:
            return False
        elapsed = self.clock() - self.started
        if self._bar is not None:
            return elapsed - self._bar_updated_s >= BAR_EVERY_S
        return self._plain_due(elapsed, done)

    def update(self, done: int, tokens: int, kv_used: float | None) -> None:
        if not self.enabled:
            return
        elapsed = self.clock() - self.started
        rate = tokens / elapsed if elapsed > 0 else 0.0
        if self._bar is not None:
            self._bar_updated_s = elapsed
            if done > self._bar.n:
                self._bar.update(done - self._bar.n)
            self._bar.set_postfix_str(f"{rate:.1f} tok/s{_kv_text(kv_used)}", refresh=False)
            return
        if self._plain_due(elapsed, done):
            self._last_line_s = elapsed
            self._last_tenth = self._tenth(done)
            self.stream.write(self.plain_line(done, elapsed, rate, kv_used) + "\n")
            self.stream.flush()

    def _tenth(self, done: int) -> int:
        return 10 * done // self.total if self.total else 0

    def _plain_due(self, elapsed: float, done: int) -> bool:
        if self._last_line_s is None:
            return elapsed >= PLAIN_FIRST_S
        since = elapsed - self._last_line_s
        if since >= PLAIN_EVERY_S:
            return True
        return since >= PLAIN_MIN_GAP_S and self._tenth(done) > self._last_tenth

    def plain_line(self, done: int, elapsed: float, rate: float,
                   kv_used: float | None) -> str:
        """`paged: 32/64 requests (50%), 812.4 tok/s, KV 41.0%, 00:12 elapsed, ETA 00:12`."""
        from tqdm import tqdm  # (its time format; a line at most every second)

        share = done / self.total if self.total else 0.0
        eta = (tqdm.format_interval(elapsed * (self.total - done) / done)
               if 0 < done < self.total else "-")
        return (f"{self.label}: {done}/{self.total} requests ({share:.0%}), {rate:.1f} tok/s"
                f"{_kv_text(kv_used)}, {tqdm.format_interval(elapsed)} elapsed, ETA {eta}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _kv_text(kv_used: float | None) -> str:
    """`, KV 41.0%`; nothing for an engine without a KV arena (None, or NaN as
    transformers' cache reports it)."""
    return "" if kv_used is None or math.isnan(kv_used) else f", KV {kv_used:.1%}"


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False
