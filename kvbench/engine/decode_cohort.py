"""`DecodeCohort`: running sequences that decode together, advanced without touching each one.

In a stretch of decode steps every running sequence computes one token and samples the next,
in lock-step with every other. A member holds the cohort step it joined at
(`Sequence.decode_from`) and its `num_computed` then (`decode_base`); a cohort step advances
them all by counting (`ordinal`), so a run costs the same for ten or a thousand sequences. A
member's `num_computed`, `token_ids` and `token_steps` are those of when it joined until the
cohort settles it: when it leaves (finishes, is preempted), or all of them (`dissolve`)
before any step that reads or changes a running sequence. The count of members, the sum of
their `num_computed` and a heap of the cohort step each samples its last token in are kept
as they change.
"""

from __future__ import annotations

import heapq

from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes


class DecodeCohort:
    """Members in admission order (their `rank`), the cohort steps run so far (`ordinal`),
    each one's engine step in `step_times.cohort_steps`."""

    def __init__(self, step_times: StepTimes, token: int = 0) -> None:
        self.step_times = step_times
        self.token = token  # the token every decode step samples (the simulated executor's)
        self.ordinal = len(step_times.cohort_steps)
        self.members: dict[int, Sequence] = {}  # seq_id -> member, in rank order
        self._rank_of: dict[int, int] = {}  # seq_id -> the member's rank
        self._offset_sum = 0  # sum of (decode_base - decode_from) over members
        # (last step, rank, member); an entry of a member that left (preempted) is stale
        self._finishes: list[tuple[int, int, Sequence]] = []
        self._ranks = 0

    def __len__(self) -> int:
        return len(self.members)

    @property
    def computed_tokens(self) -> int:
        """The members' `num_computed`, summed, as of now."""
        return self._offset_sum + len(self.members) * self.ordinal

    def join(self, seq: Sequence) -> int:
        """Add a decoding sequence (after every current member in admission order); returns
        its rank. Its `num_computed`, tokens and token steps must be current."""
        ordinal = self.ordinal
        seq.decode_from = ordinal
        seq.decode_base = computed = seq.num_computed
        self._offset_sum += computed - ordinal
        rank = self._ranks
        self._ranks = rank + 1
        self.members[seq.seq_id] = seq
        self._rank_of[seq.seq_id] = rank
        # It samples its last token in the cohort step where its count reaches `end_len`:
        # one token a step from `computed + 1` held now.
        heapq.heappush(self._finishes, (ordinal + seq.end_len - computed - 2, rank, seq))
        return rank

    def steps_to_first_finish(self) -> int:
        """Steps from now up to and including the one in which the first members sample
        their last token."""
        finishes, rank_of = self._finishes, self._rank_of
        while rank_of.get(finishes[0][2].seq_id) != finishes[0][1]:
            heapq.heappop(finishes)  # a member that left
        return finishes[0][0] - self.ordinal + 1

    def advance(self, first_step: int, num_steps: int) -> None:
        """The members decoded in engine steps `first_step .. + num_steps - 1`."""
        self.step_times.cohort_steps.extend(range(first_step, first_step + num_steps))
        self.ordinal += num_steps

    def pop_finished(self) -> list[Sequence]:
        """The members whose last token was sampled in the cohort's latest step, settled and
        out of the cohort, in admission order."""
        finishes, last, rank_of = self._finishes, self.ordinal - 1, self._rank_of
        done: list[Sequence] = []
        while finishes and finishes[0][0] <= last:
            _, rank, seq = heapq.heappop(finishes)
            if rank_of.get(seq.seq_id) == rank:  # (not a member that left)
                self.leave(seq)
                done.append(seq)
        return done

    def settle_all(self) -> None:
        """Bring every member's fields up to now, keeping them members (a from-scratch check
        of the books reads them)."""
        ordinal = self.ordinal
        for seq in self.members.values():
            _settle(seq, ordinal, self.token)
            seq.decode_from = ordinal
            seq.decode_base = seq.num_computed

    def dissolve(self) -> list[Sequence]:
        """Settle every member and empty the cohort; returns the former members."""
        ordinal = self.ordinal
        members = list(self.members.values())
        for seq in members:
            _settle(seq, ordinal, self.token)
            seq.decode_from = -1
        self.members.clear()
        self._rank_of.clear()
        self._finishes.clear()
        self._offset_sum = 0
        return members

    def leave(self, seq: Sequence) -> None:
        """Settle a member and take it out (it finished, or is preempted)."""
        _settle(seq, self.ordinal, self.token)
        del self.members[seq.seq_id]
        del self._rank_of[seq.seq_id]
        self._offset_sum -= seq.decode_base - seq.decode_from
        seq.decode_from = -1


def _settle(seq: Sequence, ordinal: int, token: int) -> None:
    """Give a member the tokens it decoded in cohort steps `decode_from .. ordinal - 1`."""
    steps = ordinal - seq.decode_from
    if steps <= 0:
        return
    seq.num_computed = seq.decode_base + steps
    seq.token_ids.extend([token] * steps)
    seq.token_steps += (~seq.decode_from, ~ordinal)

