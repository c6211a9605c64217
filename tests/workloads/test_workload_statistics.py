"""Generated lengths match the documented targets over 10,000 samples (seed 0).

Tolerances, stated per check:
- arithmetic means of lognormal lengths: within 5% relative (the standard error of a 10k-sample
  mean is CV/100: 1.8% for ShareGPT prompts, the heaviest tail; 5% is ~2.8 standard errors);
- log-scale μ and σ (mean and std of ln tokens): within 0.04 absolute (standard error σ/100 ≤
  0.012; rounding to whole tokens shifts short lengths a little);
- medians: within 5% relative;
- uniform-range means: within 2% relative; fixed lengths: exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbench.workloads import chat, lmsys, parallel, prefix_repeat, sharegpt, summarize, uniform
from kvbench.workloads.sampling import lognormal_mu

MEAN_REL = 0.05
LOG_ABS = 0.04
MEDIAN_REL = 0.05
UNIFORM_REL = 0.02


def lognormal_mean(mu: float, sigma: float) -> float:
    return math.exp(mu + sigma * sigma / 2)


def test_sharegpt_means_match_pagedattention_figures(built):
    prompt, output = built("sharegpt")
    # Kwon et al. (SOSP 2023): mean input 161.31, mean output 337.99 tokens.
    assert sharegpt.DEFAULTS["input_mean"] == 161.31
    assert sharegpt.DEFAULTS["output_mean"] == 337.99
    assert prompt.mean() == pytest.approx(161.31, rel=MEAN_REL)
    assert output.mean() == pytest.approx(337.99, rel=MEAN_REL)


def test_sharegpt_log_scale_and_heavy_tails(built):
    prompt, output = built("sharegpt")
    d = sharegpt.DEFAULTS
    for lengths, mean, sigma in (
        (prompt, d["input_mean"], d["input_sigma"]),
        (output, d["output_mean"], d["output_sigma"]),
    ):
        mu = lognormal_mu(mean, sigma)
        assert np.log(lengths).mean() == pytest.approx(mu, abs=LOG_ABS)
        assert np.log(lengths).std() == pytest.approx(sigma, abs=LOG_ABS)
        assert np.median(lengths) == pytest.approx(math.exp(mu), rel=MEDIAN_REL)
        # Heavy right tail: the 99th percentile is ~10x (outputs) to ~16x (prompts) the median.
        assert np.percentile(lengths, 99) > 8 * np.median(lengths)
        assert lengths.mean() > 1.5 * np.median(lengths)


def test_lmsys_log_scale_parameters(built):
    prompt, output = built("lmsys")
    d = lmsys.DEFAULTS
    assert (d["input_mu"], d["input_sigma"], d["output_mu"], d["output_sigma"]) == (
        6.03,
        1.00,
        4.93,
        0.84,
    )
    for lengths, mu, sigma in ((prompt, 6.03, 1.00), (output, 4.93, 0.84)):
        assert np.log(lengths).mean() == pytest.approx(mu, abs=LOG_ABS)
        assert np.log(lengths).std() == pytest.approx(sigma, abs=LOG_ABS)
        assert np.median(lengths) == pytest.approx(math.exp(mu), rel=MEDIAN_REL)
        assert lengths.mean() == pytest.approx(lognormal_mean(mu, sigma), rel=MEAN_REL)


def test_summarize_long_prompts_short_outputs(built):
    prompt, output = built("summarize")
    d = summarize.DEFAULTS
    assert prompt.mean() == pytest.approx(d["input_mean"], rel=MEAN_REL)
    assert output.mean() == pytest.approx(d["output_mean"], rel=MEAN_REL)
    assert np.log(prompt).std() == pytest.approx(d["input_sigma"], abs=LOG_ABS)
    assert np.log(output).std() == pytest.approx(d["output_sigma"], abs=LOG_ABS)
    assert prompt.mean() > 10 * output.mean()


def test_uniform_lengths_are_exact(built):
    prompt, output = built("uniform")
    assert set(prompt.tolist()) == {uniform.DEFAULTS["prompt_len"]}
    assert set(output.tolist()) == {uniform.DEFAULTS["output_len"]}


def test_parallel_uniform_ranges(built):
    prompt, output = built("parallel")
    for lengths, (low, high) in (
        (prompt, parallel.DEFAULTS["prompt_len"]),
        (output, parallel.DEFAULTS["output_len"]),
    ):
        assert lengths.min() >= low and lengths.max() <= high
        assert lengths.mean() == pytest.approx((low + high) / 2, rel=UNIFORM_REL)


def test_prefix_repeat_lengths(built):
    prompt, output = built("prefix-repeat")
    d = prefix_repeat.DEFAULTS
    low, high = d["suffix_len"]
    suffix = prompt - d["prefix_len"]
    assert suffix.min() >= low and suffix.max() <= high
    assert suffix.mean() == pytest.approx((low + high) / 2, rel=UNIFORM_REL)
    assert output.mean() == pytest.approx(sum(d["output_len"]) / 2, rel=UNIFORM_REL)


def test_chat_lengths_follow_documented_formula(built):
    prompt, output = built("chat")
    d = chat.DEFAULTS
    mean_user = sum(d["user_len"]) / 2
    mean_output = sum(d["output_len"]) / 2
    turns = d["turns_per_conversation"]
    expected = d["system_prompt_len"] + mean_user + (turns - 1) / 2 * (mean_user + mean_output)
    assert expected == 280  # the figure in chat.py's docstring
    assert prompt.mean() == pytest.approx(expected, rel=UNIFORM_REL)
    assert output.mean() == pytest.approx(mean_output, rel=UNIFORM_REL)
