"""`sjf`: continuous batching with the waiting queue ordered shortest job first.

A job's length is its prompt plus its requested output (`prompt_len + output_len`), ties by
arrival. The output length counts because kvbench's workloads fix it per request (EOS is
ignored), so it is known at arrival, and it is most of a job's time: every output token is a
decode step, while the prompt is one prefill. Ordering by prompt alone would put a short
question with a 2,000-token answer ahead of a long prompt with a one-token answer. A real
server does not know the output length; there SJF needs a predicted length instead.

Admission stays head-of-line within that order (a job the cache cannot take now blocks those
behind it, as in `continuous`), so a long job still runs once it is the shortest waiting; it
can starve only while shorter jobs keep arriving. Preempted sequences go back to the front.
"""

from __future__ import annotations

from kvbench.core.sequence import Sequence
from kvbench.scheduling.continuous import ContinuousBatching
from kvbench.scheduling.queue_order import QueueOrder
from kvbench.scheduling.registry import register_policy


class ShortestJobFirst(QueueOrder):
    name = "sjf"

    def key(self, seq: Sequence) -> tuple:
        request = seq.request
        return (request.prompt_len + request.output_len, request.arrival_s)


@register_policy(
    "sjf", "continuous, waiting queue ordered by prompt + output tokens (shortest job first)"
)
class ShortestJobFirstBatching(ContinuousBatching):
    queue_order = ShortestJobFirst
