"""One AttentionOps protocol, two implementations; the variants a shape meets."""

from __future__ import annotations

import pytest
import torch

from kvbench.kernels import backend
from kvbench.kernels import reference as ref
from kvbench.kernels.attention_ops import AttentionOps
from kvbench.kernels.attention_shape import AttentionShape

pytest.importorskip("triton")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_both_implementations_follow_the_protocol_and_agree():
    torch_ops, triton_ops = backend.get_ops("torch"), backend.get_ops("triton")
    assert isinstance(torch_ops, AttentionOps) and isinstance(triton_ops, AttentionOps)
    assert (torch_ops.name, triton_ops.name) == ("torch", "triton")
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 16, generator=gen).to(DEVICE)
    k = torch.randn(48, 2, 16, generator=gen).to(DEVICE)
    v = torch.randn(48, 2, 16, generator=gen).to(DEVICE)
    tables = torch.tensor([[2, 0], [1, 2]], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([19, 30], dtype=torch.int32, device=DEVICE)
    args = (q, k, v, tables, lens, 16, 0.25)
    torch.testing.assert_close(triton_ops.paged_decode_attention(*args),
                               torch_ops.paged_decode_attention(*args), rtol=1e-4, atol=1e-5)


def test_attention_shape_checks_the_scale_kind():
    with pytest.raises(ValueError, match="scale_kind"):
        AttentionShape(8, 2, 64, torch.bfloat16, ref.FP8_DTYPE)  # fp8 needs a scale kind
    with pytest.raises(ValueError, match="scale_kind"):
        AttentionShape(8, 2, 64, torch.bfloat16, torch.bfloat16, scale_kind="scalar")
    with pytest.raises(ValueError, match="multiple"):
        AttentionShape(6, 4, 64, torch.bfloat16, torch.bfloat16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU interpreter compiles nothing")
def test_precompile_is_free_off_cuda():
    shape = AttentionShape(8, 2, 64, torch.bfloat16, ref.FP8_DTYPE, scale_kind="per_head")
    assert backend.get_ops("triton").precompile(shape, torch.device("cpu")) == 0.0


def test_a_shape_meets_nine_launches():
    from kvbench.kernels.variants import shape_launches

    shape = AttentionShape(8, 2, 32, torch.float32, torch.float32)
    names = [name for name, _ in shape_launches(shape, DEVICE)]
    assert names[0] == "write_kv" and len(names) == 9
    assert sum(n.startswith("prefill") for n in names) == 2
    assert sum(n.endswith("_merge_splits_kernel") for n in names) == 2


def test_variant_shapes_meet_each_layer_kind_and_latent_attention_has_no_prefill():
    from kvbench.kernels.variants import shape_launches

    hybrid = AttentionShape(8, 2, 32, torch.float32, torch.float32, window_kinds=(False, True),
                            softcap=True, sinks=True)
    launches = shape_launches(hybrid, DEVICE)
    assert len(launches) == 21  # write, 2 kinds x 2 layouts x 4, the windows' ring layout x 4
    windowed = [launch for name, launch in launches if "-window" in name]
    assert len(windowed) == 12 and all(launch.constexprs.get("WINDOW", True)
                                       for launch in windowed)
    rings = [name for name, launch in launches if launch.constexprs.get("RING")]
    assert len(rings) == 3 and all("-window" in name for name in rings)
    assert not any(launch.constexprs.get("WINDOW") for name, launch in launches
                   if "-window" not in name)
    assert all(launch.constexprs["SOFTCAP"] and launch.constexprs["SINKS"]
               for _, launch in launches if "WINDOW" in launch.constexprs)
    mla = AttentionShape(16, 1, 576, torch.bfloat16, torch.bfloat16, kv_lora_rank=512)
    names = [name for name, _ in shape_launches(mla, DEVICE)]
    assert len(names) == 7 and not any(n.startswith("prefill") for n in names)
    assert sum("_mla_decode_kernel" in n for n in names) == 4


def test_attention_shape_checks_the_variants():
    with pytest.raises(ValueError, match="window_kinds"):
        AttentionShape(8, 2, 64, torch.bfloat16, torch.bfloat16, window_kinds=())
    with pytest.raises(ValueError, match="one KV head"):
        AttentionShape(16, 2, 576, torch.bfloat16, torch.bfloat16, kv_lora_rank=512)
    with pytest.raises(ValueError, match="no window"):
        AttentionShape(16, 1, 576, torch.bfloat16, torch.bfloat16, kv_lora_rank=512,
                       window_kinds=(True,))
