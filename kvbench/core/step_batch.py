"""`StepBatch`: the flattened tokens of one engine step, handed to an executor."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.core.layout import KVLayout


@dataclass
class StepBatch:
    """Tokens of all scheduled sequences, prefills (query length > 1 or first) before decodes.

    `sample_rows` index the tokens whose logits are needed (the last token of every
    sequence that has computed all its tokens after this step).
    """

    input_ids: list[int]
    positions: list[int]
    layout: KVLayout
    num_prefill_seqs: int
    sample_rows: list[int]

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_decode_seqs(self) -> int:
        return len(self.layout.query_lens) - self.num_prefill_seqs
