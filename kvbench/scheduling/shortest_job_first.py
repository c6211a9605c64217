"""`sjf`: the waiting queue ordered shortest job first, under any batching policy.

A job's length is its prompt plus its requested output (`prompt_len + output_len`), ties by
arrival. The output length counts because kvbench's workloads fix it per request (EOS is
ignored), so it is known at arrival, and it is most of a job's time: every output token is a
decode step, while the prompt is one prefill. Ordering by prompt alone would put a short
question with a 2,000-token answer ahead of a long prompt with a one-token answer. A real
server does not know the output length; there SJF needs a predicted length instead.

Admission stays head-of-line within that order (a job the cache cannot take now blocks those
behind it), so a long job still runs once it is the shortest waiting; it can starve only
while shorter jobs keep arriving. Preempted sequences go back to the front. With `static`
batching, each batch is formed from the shortest jobs waiting.
"""

from __future__ import annotations

from kvbench.core.sequence import Sequence
from kvbench.scheduling.queue_order import QueueOrder
from kvbench.scheduling.registry import register_queue_order


@register_queue_order("sjf", "shortest job first: by prompt + output tokens, ties by arrival")
class ShortestJobFirst(QueueOrder):

    def key(self, seq: Sequence) -> tuple:
        request = seq.request
        return (request.prompt_len + request.output_len, request.arrival_s)
