"""Seeded random weights: reproducible per device type, drawn on an accelerator by its own
generator in bounded chunks (an 8B preset loads in seconds there, not the CPU's ~40 s)."""

from __future__ import annotations

import pytest
import torch

from kvbench.models import loader
from kvbench.models.loader import load_model


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_the_same_seed_gives_the_same_weights_and_another_seed_others():
    first, _ = load_model("tiny", seed=3)
    again, _ = load_model("tiny", seed=3)
    other, _ = load_model("tiny", seed=4)
    a, b, c = _weights(first), _weights(again), _weights(other)
    assert all(torch.equal(a[n], b[n]) for n in a)
    matrix = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(a[matrix], c[matrix])
    assert abs(float(a[matrix].std()) - 0.02) < 0.002 and abs(float(a[matrix].mean())) < 0.002
    assert bool((a["model.norm.weight"] == 1).all())


def test_an_accelerator_draws_each_weight_on_its_device_in_bounded_chunks(monkeypatch):
    # The CPU stands in for the accelerator here: the path is the one a GPU takes.
    draws = []
    normal = torch.Tensor.normal_

    def recording_normal(self, mean=0.0, std=1.0, *, generator=None):
        if self.device.type != "meta":  # the module's own init, on meta, draws nothing
            draws.append((self.numel(), self.device, generator.device, self.dtype))
        return normal(self, mean, std, generator=generator)

    monkeypatch.setattr(loader, "draws_on_device", lambda device: True)
    monkeypatch.setattr(loader, "DUMMY_CHUNK_ELEMENTS", 4096)
    monkeypatch.setattr(torch.Tensor, "normal_", recording_normal)
    model, config = load_model("tiny", dtype=torch.bfloat16, seed=3)
    monkeypatch.undo()
    drawn = sum(n for n, *_ in draws)
    matrices = sum(p.numel() for name, p in model.named_parameters()
                   if not name.endswith(("norm.weight", "bias")))
    assert drawn == matrices
    assert max(n for n, *_ in draws) == 4096  # a float32 chunk at a time, then cast
    assert {(d.type, g.type, dt) for _, d, g, dt in draws} == {("cpu", "cpu", torch.float32)}
    weights = _weights(model)
    matrix = weights["model.layers.0.mlp.up_proj.weight"].float()
    assert abs(float(matrix.std()) - 0.02) < 0.002
    again = _weights(load_model("tiny", dtype=torch.bfloat16, seed=3)[0])
    assert all(torch.equal(weights[n], again[n]) for n in weights)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_the_same_seed_gives_the_same_weights():
    first = _weights(load_model("tiny", device="cuda", seed=5)[0])
    again = _weights(load_model("tiny", device="cuda", seed=5)[0])
    assert all(torch.equal(first[n], again[n]) for n in first)
