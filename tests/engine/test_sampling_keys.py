"""The sampling keys an executor reads are built lazily from the sampled sequences
(`SamplingParams(rows=..., forks=...)`, issue 15). Seeded sampling depends on them: each must
be (request id, sample index, the position of the token sampled) — the sequence's length
when the step was built — and a forking parent's row must carry its siblings' keys."""

from __future__ import annotations

from kvbench.engine.engine import Engine
from tests.scheduling.helpers import drive, make_engine, prompt_of, request


def test_lazy_keys_are_the_positions_sampled_at_every_step():
    engine = make_engine(strategy="paged", block_size=4, temperature=0.9, seed=7,
                         max_model_len=64, kv_memory=40 * 2048)
    executor = engine.executor
    run_step = executor.execute_and_sample
    seen: list[tuple] = []

    def checking_execute(batch, sampling):
        rows = sampling._rows
        expected = []
        for i, seq in enumerate(rows):
            own = (seq.request.request_id, seq.sample_index, len(seq.token_ids))
            if i in sampling.forks:
                assert sampling.forks[i] == Engine._fork_keys(seq)
                assert sampling.forks[i][0] == own
                expected.append(sampling.forks[i])
            else:
                expected.append((own,))
        assert sampling.keys == expected
        seen.append(tuple(len(k) for k in sampling.keys))
        return run_step(batch, sampling)

    executor.execute_and_sample = checking_execute
    arrivals = [(i, request(i, prompt_of(i, 5 + 3 * i), 6, n=1 + i % 3)) for i in range(5)]
    drive(engine, arrivals, check=None)
    assert any(max(lengths) > 1 for lengths in seen)  # forking rows were among them
    assert sum(s.preemptions for group in engine.sequences.values() for s in group) > 0
