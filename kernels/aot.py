"""Ahead-of-time builds of the launches the Triton wrappers make, for a GPU that is not here.

`compile_launch(launch, arch)` compiles one `triton_ops.Launch` to a cubin for compute
capability ``arch`` (80, 90, ...) with the ptxas that the Triton wheel ships, specializing
the arguments exactly as Triton's JIT would at launch time (same binder, same attributes), and
reads the resources the driver would report: registers, local memory (spills) and shared
memory. No GPU and no CUDA driver are needed, so CI can prove that every variant builds for
A100 and H100 class GPUs.

Triton internals are used (the JIT's binder); they are stable across 3.4-3.9 but not public.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

from . import launch_config
from .aot_matrix import ARCHS, case_archs, matrix
from .triton_ops import Launch


@dataclass(frozen=True)
class Build:
    """The resources of one compiled kernel for one target."""

    name: str
    arch: int
    registers: int
    local_bytes: int  # per thread; > 0 means register spills (or a stack)
    shared_bytes: int  # dynamic shared memory per block
    compile_s: float


def _specialize(launch: Launch, backend):
    fn = launch.kernel
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.constexprs, **launch.options)
    return fn._pack_args(backend, options, bound, specialization, options)


_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def _resource_usage(cubin: bytes) -> tuple[int, int, int]:
    """(registers, stack + local bytes, static shared bytes) from ``cuobjdump``."""
    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([tool, "--dump-resource-usage", str(path)], check=True,
                              capture_output=True, text=True).stdout
    match = _USAGE.search(text)
    if match is None:
        raise RuntimeError(f"cannot read the resource usage from cuobjdump:\n{text}")
    regs, stack, shared, local = (int(g) for g in match.groups())
    return regs, stack + local, shared


def compile_launch(launch: Launch, arch: int) -> Build:
    """Compile `launch` for compute capability `arch`; raises what Triton raises on failure."""
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    options, signature, constexprs, attrs = _specialize(launch, backend)
    start = time.perf_counter()
    kernel = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                            target=target, options=options.__dict__)
    elapsed = time.perf_counter() - start
    regs, local, static_shared = _resource_usage(kernel.asm["cubin"])
    return Build(name=kernel.metadata.name, arch=arch, registers=regs, local_bytes=local,
                 shared_bytes=kernel.metadata.shared + static_shared, compile_s=elapsed)


# ----------------------------------------------------------------------------------------------
# Builds of the matrix (``python -m kvbench.kernels.aot``)

SMS = {80: 108, 86: 84, 89: 128, 90: 132}


def build_case(case: str, arch: int) -> list[dict]:
    """Compile every launch of matrix case `case` for `arch`; one record per launch, failures
    included (``error`` set) so that one bad variant does not hide the others."""
    # triton/torch: in each build worker process
    import torch

    from .triton_ops import Target
    from .variants import shape_launches

    shape = matrix()[case]
    target = Target(arch=arch, sms=SMS.get(arch, 132))
    records = []
    for name, launch in shape_launches(shape, torch.device("cpu"), target=target):
        record = dict(case=case, arch=arch, launch=name,
                      fp32_operands=bool(launch.constexprs.get("DOT_FP32", False)),
                      head_dim=shape.head_dim, **launch.options)
        try:
            build = compile_launch(launch, arch)
        except Exception as exc:  # noqa: BLE001 (reported per variant, asserted by tests)
            record["error"] = f"{type(exc).__name__}: {str(exc).strip()[-400:]}"
        else:
            record.update(registers=build.registers, local_bytes=build.local_bytes,
                          shared_bytes=build.shared_bytes,
                          shared_limit_bytes=launch_config.max_shared_bytes(arch),
                          compile_s=round(build.compile_s, 3))
        records.append(record)
    return records


def build_matrix(archs=ARCHS, cases=None, jobs: int = 1) -> list[dict]:
    """`build_case` for every (case, arch) the matrix builds, in `jobs` processes."""
    pairs = [(c, a) for c in matrix() if not cases or c in cases for a in archs
             if a in case_archs(c)]
    if jobs <= 1:
        return [r for c, a in pairs for r in build_case(c, a)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(build_case, *zip(*pairs, strict=True))
        return [r for records in results for r in records]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile every kernel variant ahead of time.")
    parser.add_argument("--arch", type=int, action="append", help="e.g. 80, 90 (repeatable)")
    parser.add_argument("--case", action="append", help="only these case ids (repeatable)")
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("kvbench: error: unset TRITON_INTERPRET for ahead-of-time builds")
        return 2
    records = build_matrix(tuple(args.arch or ARCHS), args.case, args.jobs)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    failed = 0
    for r in records:
        status = r.get("error") or (
            f"regs {r['registers']:3d} local {r['local_bytes']:5d} B shared {r['shared_bytes']:6d} B"
            f" {r['compile_s']:.2f} s")
        failed += "error" in r
        print(f"sm{r['arch']} {r['case']:34s} {r['launch']:42s} {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
