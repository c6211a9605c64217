"""`StepBatch`: the flattened tokens of one engine step, handed to an executor."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.core.layout import KVLayout


@dataclass
class StepBatch:
    """Tokens of all scheduled sequences, prefills (query length > 1 or first) before decodes.

    `sample_rows` index the tokens whose logits are needed (the last token of every
    sequence that has computed all its tokens after this step). `input_ids` and `positions`
    are empty for an executor that does not read them (`Executor.reads_token_inputs`);
    `num_tokens` counts the step's tokens either way.
    """

    input_ids: list[int]
    positions: list[int]
    layout: KVLayout
    num_prefill_seqs: int
    sample_rows: list[int]
    num_tokens: int = -1  # -1: len(input_ids)

    def __post_init__(self) -> None:
        if self.num_tokens < 0:
            self.num_tokens = len(self.input_ids)

    @property
    def num_decode_seqs(self) -> int:
        return len(self.layout.query_lens) - self.num_prefill_seqs
