"""`kvbench simulate` lets a finished sequence's token ids go once its memory is back
(`Engine.keep_finished_token_ids`): only their count stays, which is all the results read.
A policy that keeps finished members' memory (static batching) keeps their ids with it."""

from __future__ import annotations

import pytest

from kvbench.core.sequence import TokenCount
from kvbench.session.run_options import RunOptions
from kvbench.session.runner import prepare, run_one
from kvbench.session.session import expand_runs

VALUES = dict(model="tiny", gpu="a100-40gb", workload="uniform",
              workload_params=("prompt_len=8", "output_len=12"), num_requests=5,
              request_rate="inf", strategy="prefix", max_model_len=64,
              kv_memory=str(1024 * 1024), warmup=0)


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_finished_sequences_keep_the_count_of_their_tokens(tmp_path, batching):
    (run,) = expand_runs(RunOptions.for_kind("simulate", batching=batching, **VALUES))
    prepared = prepare(run)
    engine = prepared[0].engine
    run_one(run, tmp_path / "out", show_progress=False, prepared=prepared)
    sequences = [seq for group in engine.sequences.values() for seq in group]
    assert len(sequences) == 5
    for seq in sequences:
        assert len(seq.token_ids) == seq.end_len == 8 + 12
        assert seq.num_generated == 12
        # static batching: a finished member's memory went back only with its batch's
        assert isinstance(seq.token_ids, TokenCount) == (batching == "continuous")
    assert engine.strategy.is_whole()
