"""YaRN's inverse frequencies and attention factor equal transformers' rope init function's
(`ROPE_INIT_FUNCTIONS["yarn"]`), for gpt-oss's fields and the variants other configs use."""

from __future__ import annotations

import pytest
import torch

from kvbench.errors import KvbenchInputError
from kvbench.models.rope_yarn import yarn_attention_factor, yarn_inv_freq, yarn_scaling

transformers = pytest.importorskip("transformers")

# name -> (head_dim, rope_theta, rope fields)
CASES = {
    "gpt-oss": (64, 150000.0, dict(factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                   original_max_position_embeddings=4096)),
    "truncated-by-default": (128, 1e6, dict(factor=4.0, original_max_position_embeddings=32768)),
    "mscale-ratio": (64, 10000.0, dict(factor=40.0, beta_fast=32, beta_slow=1, mscale=0.707,
                                       mscale_all_dim=1.0, original_max_position_embeddings=4096)),
    "attention-factor-given": (32, 10000.0, dict(factor=8.0, attention_factor=0.8,
                                                 original_max_position_embeddings=64)),
    "ramp-of-one-point": (16, 10000.0, dict(factor=2.0, beta_fast=4.0, beta_slow=4.0,
                                            original_max_position_embeddings=64)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_yarn_matches_transformers_rope_init(case):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    head_dim, theta, fields = CASES[case]
    rope = {"rope_type": "yarn", "rope_theta": theta, **fields}
    config = transformers.GptOssConfig(head_dim=head_dim, rope_parameters=dict(rope))
    theirs, their_factor = ROPE_INIT_FUNCTIONS["yarn"](config, None)
    scaling = yarn_scaling(rope, "m")
    assert torch.equal(yarn_inv_freq(head_dim, theta, scaling), theirs)
    assert yarn_attention_factor(scaling) == pytest.approx(their_factor, rel=1e-12)


def test_yarn_differs_from_plain_rope():
    """The scaling moves low frequencies (a no-op implementation would pass nothing above)."""
    head_dim, theta, fields = CASES["gpt-oss"]
    scaled = yarn_inv_freq(head_dim, theta, yarn_scaling({"rope_type": "yarn", **fields}, "m"))
    plain = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    assert torch.equal(scaled[:4], plain[:4]) and (scaled[-4:] < plain[-4:] / 30).all()


@pytest.mark.parametrize(("fields", "key"), [
    (dict(factor=-1.0), "factor"),
    (dict(truncate="no"), "truncate"),
    (dict(low_freq_factor=1.0), "low_freq_factor"),
])
def test_bad_yarn_field_is_refused_naming_the_key(fields, key):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, **fields}
    with pytest.raises(KvbenchInputError, match=key):
        yarn_scaling(rope, "m")
