"""Sizes checked before they are allocated (docs/workloads.md, Limits).

A trace field may count at most `MAX_TRACE_TOKENS` tokens (a longer one is a corrupt trace);
readers build at most `max_model_len` tokens of a prompt; a workload's requests and tokens are
checked against the machine's free memory. Arrival times may span at most `MAX_ARRIVAL_S`:
past it a float clock in seconds no longer resolves a millisecond step."""

from __future__ import annotations

from kvbench.core.host_memory import cpu_available_bytes
from kvbench.errors import KvbenchInputError
from kvbench.units import format_bytes

# The longest token count a trace field may give (2**24 = 16,777,216 tokens).
MAX_TRACE_TOKENS = 1 << 24
# A lower bound of what one request costs before its tokens (the Request, its Sequence, its
# result row and token times): enough to refuse a count no machine holds, never one that fits.
REQUEST_BYTES = 1024
# One prompt token of a built workload, rounded up: the tuple's pointer and the engine's
# copy of it (`TokenSampler` shares one int object per id and draws in bounded chunks).
TOKEN_BYTES = 24
# The widest span of arrival times replayed (ulp(1e10 s) is about 2e-6 s).
MAX_ARRIVAL_S = 1e10


def prompt_cap(max_model_len: int | None) -> int:
    """How many tokens of a prompt a reader builds: the model's maximum length (any more
    would be clipped away) or, without one, the longest a trace may give."""
    return MAX_TRACE_TOKENS if max_model_len is None else min(max_model_len, MAX_TRACE_TOKENS)


def check_workload_fits(num_requests: int, num_tokens: int, what: str,
                        way_out: str = "replay fewer requests (--num-requests)",
                        available_bytes: int | None = None) -> None:
    """Refuse `num_requests` requests of `num_tokens` prompt tokens in all when they cannot
    fit in the memory the machine has free; `what` names the input at fault
    (`--num-requests`, `trace.jsonl`), `way_out` what to change."""
    need = num_requests * REQUEST_BYTES + num_tokens * TOKEN_BYTES
    have = cpu_available_bytes() if available_bytes is None else available_bytes
    if have is None or need <= have:
        return
    parts = [f"{num_requests:,} requests"] if num_requests else []
    parts += [f"{num_tokens:,} prompt tokens"] if num_tokens else []
    raise KvbenchInputError(
        f"{what}: {' and '.join(parts)} need at least {format_bytes(need)} of memory, the "
        f"machine has {format_bytes(have)} available; {way_out}"
    )


def check_arrival_span(last_arrival_s: float) -> None:
    """Refuse arrivals spread wider than `MAX_ARRIVAL_S` (the first arrives at t = 0)."""
    if not last_arrival_s <= MAX_ARRIVAL_S:
        years = MAX_ARRIVAL_S / (365.25 * 86400)
        span = "more than 1e300" if last_arrival_s > 1e300 else f"{last_arrival_s:.3g}"
        raise KvbenchInputError(
            f"the last request arrives {span} s after the first, past the {MAX_ARRIVAL_S:,.0f} "
            f"s ({years:.1f} years) kvbench replays: raise --request-rate (or "
            "--conversation-rate) or lower --time-scale"
        )
