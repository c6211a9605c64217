"""`BlockResidency`: how long a tier's cached blocks live, sit idle and wait between hits.

vLLM's KV cache residency metrics (`--kv-cache-metrics`, `vllm/v1/core/kv_cache_metrics.py`,
`KVCacheMetricsCollector`; exported as `vllm:kv_block_lifetime_seconds`,
`vllm:kv_block_idle_before_evict_seconds`, `vllm:kv_block_reuse_gap_seconds`), with the same
events: a block is *allocated* (`on_block_allocated`: it is handed out of the free queue), *accessed*
(`on_block_accessed`: a prefix hit touches it) and *evicted* (`on_block_evicted`: its cached
content is dropped for a new allocation). At eviction its **lifetime** (allocation to
eviction) and its **idle time** (last access, or allocation, to eviction) are recorded; a
**reuse gap** is the time between two consecutive accesses (the first access after the
allocation starts the history and makes no gap, as in vLLM).

Where kvbench differs: every block is recorded (vLLM samples `--kv-cache-metrics-sample`,
1% by default); every reuse gap is recorded when it happens (vLLM reports a block's last four
accesses' gaps when it is evicted, so a block that stays cached to the end reports none);
and only blocks whose content was cached are evicted (vLLM's free queue also hands back
blocks that never held a hash, and times them too).

Times are the engine's clock (`clock`, set by the strategy from `CacheStrategy.set_clock`:
simulated seconds under `kvbench simulate`); a block id indexes the tier's blocks.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

_NEVER = float("nan")  # a block never accessed since its allocation


def _no_clock() -> float:
    return 0.0


class BlockResidency:
    """Residency events of `num_blocks` blocks (ids `0..num_blocks-1`) of one tier."""

    def __init__(self, num_blocks: int) -> None:
        self.clock: Callable[[], float] = _no_clock
        self._born = array("d", [0.0]) * num_blocks  # allocation time of each block
        self._used = array("d", [0.0]) * num_blocks  # last access, or allocation
        self._hit = array("d", [_NEVER]) * num_blocks  # last access (NaN: none yet)
        self.lifetimes_s = array("d")
        self.idle_s = array("d")
        self.reuse_gaps_s = array("d")

    def allocated(self, block: int) -> None:
        now = self.clock()
        self._born[block] = self._used[block] = now
        self._hit[block] = _NEVER

    def accessed(self, blocks: Iterable[int]) -> None:
        now = self.clock()
        hit, used, gaps = self._hit, self._used, self.reuse_gaps_s
        for block in blocks:
            last = hit[block]
            if last == last:  # not NaN: a gap since the last access
                gaps.append(now - last)
            hit[block] = used[block] = now

    def evicted(self, block: int) -> None:
        now = self.clock()
        self.lifetimes_s.append(now - self._born[block])
        self.idle_s.append(now - self._used[block])

    def rebase(self, origin_s: float) -> None:
        """The clock is about to restart from 0 at `origin_s` (a run's start after warm-up):
        the blocks' times move with it, and the events so far are forgotten."""
        for times in (self._born, self._used, self._hit):
            for i, t in enumerate(times):
                times[i] = t - origin_s
        self.lifetimes_s = array("d")
        self.idle_s = array("d")
        self.reuse_gaps_s = array("d")
