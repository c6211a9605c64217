"""Every bad input a user has been seen to give, in one table: each gives exactly
one stderr line starting `kvbench: error:`, the documented exit code, no traceback, and
nothing written under `--out`. A new refusal is one row here.

Cases run in-process through `kvbench.cli.main` (fast); `{out}` in a command is a folder
that must stay empty, `{tmp}` the test's scratch folder with the files `_setup` wrote.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kvbench.cli import main
from kvbench.errors import KvbenchInputError

SIM = ["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--warmup", "0"]
RUN = ["run", "--num-requests", "4", "--warmup", "0"]

# (id, command, exit code). Exit 2 is bad usage or input (docs/cli.md).
CASES: list[tuple[str, list[str], int]] = [
    # names
    ("unknown-strategy", [*RUN, "--strategy", "nope"], 2),
    ("unknown-batching", [*RUN, "--batching", "nope"], 2),
    ("unknown-workload", [*RUN, "--workload", "nope"], 2),
    ("unknown-model-preset", [*RUN, "--model", "nope"], 2),
    ("unknown-kv-cache-dtype", [*RUN, "--kv-cache-dtype", "fp16x"], 2),
    ("unknown-dtype", [*RUN, "--dtype", "float8"], 2),
    ("unknown-gpu", [*SIM, "--gpu", "z80"], 2),
    ("unknown-option", [*RUN, "--no-such-option"], 2),
    ("unknown-command", ["nope"], 2),
    ("unknown-workload-param", [*RUN, "--workload", "uniform", "--workload-param", "x=1"], 2),
    # sizes, counts and rates
    ("bad-kv-memory", [*RUN, "--kv-memory", "12XB"], 2),
    ("negative-kv-memory", [*RUN, "--kv-memory", "-1MiB"], 2),
    ("bad-request-rate", [*RUN, "--request-rate", "fast"], 2),
    ("negative-request-rate", [*RUN, "--request-rate", "-1"], 2),
    ("zero-num-requests", ["run", "--num-requests", "0"], 2),
    ("block-size-not-power-of-two", [*RUN, "--block-size", "3"], 2),
    ("negative-temperature", [*RUN, "--temperature", "-1"], 2),
    ("zero-max-num-seqs", [*RUN, "--max-num-seqs", "0"], 2),
    ("zero-repeat", [*RUN, "--repeat", "0"], 2),
    ("zero-max-concurrency", [*RUN, "--max-concurrency", "0"], 2),
    ("zero-burstiness", [*RUN, "--burstiness", "0"], 2),
    ("zero-time-scale", [*RUN, "--time-scale", "0"], 2),
    ("bad-slo", [*RUN, "--slo", "speed=fast"], 2),
    ("gpu-memory-utilization-above-1", [*RUN, "--gpu-memory-utilization", "1.5"], 2),
    ("zero-max-model-len", [*RUN, "--max-model-len", "0"], 2),
    ("negative-max-model-len", [*RUN, "--max-model-len", "-1"], 2),
    ("zero-max-num-batched-tokens", [*RUN, "--max-num-batched-tokens", "0"], 2),
    ("negative-max-num-batched-tokens", [*RUN, "--max-num-batched-tokens", "-5"], 2),
    ("negative-warmup", ["run", "--num-requests", "4", "--warmup", "-1"], 2),
    ("max-model-len-above-model", [*RUN, "--max-model-len", "100000000"], 2),
    ("zero-tensor-parallel-size", [*SIM, "--tensor-parallel-size", "0"], 2),
    ("zero-cpu-threads", [*RUN, "--cpu-threads", "0"], 2),
    # contradictions (docs/cli.md, Contradictions)
    ("kv-scale-without-fp8", [*RUN, "--kv-scale", "0.1"], 2),
    ("kv-memory-and-gpu-memory-utilization",
     [*RUN, "--kv-memory", "8MiB", "--gpu-memory-utilization", "0.5"], 2),
    ("strategy-listed-twice", [*RUN, "--strategy", "paged,paged"], 2),
    ("fp8-and-paged-fp8-are-one-run",
     [*RUN, "--strategy", "paged,fp8", "--kv-cache-dtype", "fp8"], 2),
    ("reserve-listed-twice", [*RUN, "--strategy", "contiguous", "--reserve", "max,max"], 2),
    ("batching-listed-twice", [*SIM, "--batching", "static,static"], 2),
    ("gpu-memory-utilization-on-cpu", [*RUN, "--gpu-memory-utilization", "0.5"], 2),
    # traces and files
    ("malformed-trace", [*RUN, "--workload", "{tmp}/malformed.jsonl"], 2),
    ("empty-trace", [*RUN, "--workload", "{tmp}/empty.jsonl"], 2),
    ("binary-trace", [*RUN, "--workload", "{tmp}/binary.jsonl"], 2),
    ("missing-trace", [*RUN, "--workload", "{tmp}/missing.jsonl"], 2),
    # model folders
    ("no-such-model-folder", [*RUN, "--model", "/nonexistent/model"], 2),
    ("model-folder-without-config", [*RUN, "--model", "{tmp}/empty-model"], 2),
    ("model-folder-corrupt-config", [*RUN, "--model", "{tmp}/corrupt-config"], 2),
    ("model-folder-corrupt-weights", [*RUN, "--model", "{tmp}/corrupt-weights"], 2),
    ("model-too-big-for-memory", [*RUN, "--model", "llama-3-70b"], 2),
    # output folders
    ("out-is-a-file", [*RUN, "--out", "{tmp}/a-file"], 2),
    ("out-under-a-file", [*RUN, "--out", "{tmp}/a-file/sub"], 2),
    ("out-in-proc", [*RUN, "--out", "/proc/kvbench-x"], 2),
    ("out-not-permitted", [*RUN, "--out", "/sys/kvbench-x"], 2),
    # an empty --out (an unset shell variable) would be the current folder
    ("out-empty", [*RUN, "--out", ""], 2),
    ("simulate-out-empty", [*SIM, "--out", ""], 2),
    ("sweep-out-empty", ["sweep", "--simulate", "--model", "llama-2-7b",
                         "--strategy", "paged,contiguous", "--out", ""], 2),
    ("calibrate-out-empty", ["calibrate", "--out", ""], 2),
    # a sweep's --name is one folder under --out, never a way out of it
    ("sweep-name-escapes", ["sweep", "--simulate", "--model", "llama-2-7b", "--num-requests",
                            "4", "--out", "{tmp}/out", "--name", "../../escape"], 2),
    ("sweep-name-is-a-path", ["sweep", "--simulate", "--model", "llama-2-7b", "--num-requests",
                              "4", "--out", "{tmp}/out", "--name", "a/b"], 2),
    ("sweep-toml-name-escapes", ["sweep", "{tmp}/escape.toml"], 2),
    ("sweep-out-is-a-file", ["sweep", "--simulate", "--model", "llama-2-7b",
                             "--strategy", "paged,contiguous", "--out", "{tmp}/a-file"], 2),
    # results folders for report and compare
    ("report-missing-folder", ["report", "{tmp}/missing-results"], 2),
    ("report-not-a-results-folder", ["report", "{tmp}/empty-model"], 2),
    ("report-corrupt-summary", ["report", "{tmp}/corrupt-results"], 2),
    ("compare-corrupt-summary", ["compare", "{tmp}/corrupt-results", "{tmp}/corrupt-results"],
     2),
    ("compare-missing-folder", ["compare", "{tmp}/missing-results", "{tmp}/missing-b"], 2),
    # estimate
    ("estimate-unknown-model", ["estimate", "--model", "nope"], 2),
    ("estimate-negative-concurrency", ["estimate", "--model", "llama-2-7b",
                                       "--concurrency", "-1"], 2),
    ("estimate-zero-context", ["estimate", "--model", "llama-2-7b", "--context", "0"], 2),
    ("estimate-bad-kv-dtype", ["estimate", "--model", "llama-2-7b", "--kv-dtype", "int3"], 2),
    # simulator GPU files
    ("gpu-spec-not-toml", [*SIM, "--gpu-spec", "{tmp}/gpu.txt"], 2),
    ("gpu-spec-missing", [*SIM, "--gpu-spec", "{tmp}/missing.toml"], 2),
    ("gpu-spec-garbage", [*SIM, "--gpu-spec", "{tmp}/garbage.toml"], 2),
    ("gpu-spec-incomplete", [*SIM, "--gpu-spec", "{tmp}/incomplete.toml"], 2),
    # sizes that would exhaust the machine: refused before they are allocated
    ("trace-prompt-of-a-billion-tokens", [*RUN, "--workload", "{tmp}/huge-prompt.jsonl"], 2),
    ("trace-output-of-a-billion-tokens", [*RUN, "--workload", "{tmp}/huge-output.jsonl"], 2),
    ("csv-trace-prompt-of-a-billion-tokens",
     [*RUN, "--workload", "{tmp}/huge-prompt.csv"], 2),
    ("num-requests-a-trillion", ["run", "--num-requests", "1000000000000", "--warmup", "0"], 2),
    ("simulate-num-requests-a-trillion",
     ["simulate", "--model", "llama-2-7b", "--num-requests", "1000000000000", "--warmup", "0"],
     2),
    ("warmup-a-trillion", ["run", "--num-requests", "4", "--warmup", "1000000000000"], 2),
    ("max-num-seqs-a-billion", [*RUN, "--max-num-seqs", "1000000000"], 2),
    ("simulate-max-num-seqs-a-billion", [*SIM, "--max-num-seqs", "1000000000"], 2),
    ("simulate-70b-on-an-l4", [*SIM, "--model", "llama-3-70b", "--gpu", "l4"], 2),
    ("seed-past-64-bits", [*RUN, "--seed", "1180591620717411303424"], 2),
    ("simulate-seed-past-64-bits", [*SIM, "--seed", "1180591620717411303424"], 2),
    # values no run can use
    ("temperature-nan", [*RUN, "--temperature", "nan"], 2),
    ("temperature-inf", [*RUN, "--temperature", "inf"], 2),
    ("kv-scale-inf", [*RUN, "--kv-cache-dtype", "fp8", "--kv-scale", "inf"], 2),
    ("kv-scale-nan", [*RUN, "--kv-cache-dtype", "fp8", "--kv-scale", "nan"], 2),
    ("workload-param-with-a-trace",
     [*RUN, "--workload", "{tmp}/good.jsonl", "--workload-param", "prompt_len=4"], 2),
    ("estimate-block-size-not-power-of-two",
     ["estimate", "--model", "llama-2-7b", "--block-size", "3"], 2),
    ("model-folder-nan-weights", [*RUN, "--model", "{tmp}/nan-weights"], 2),
    ("jsonl-line-is-a-list", [*RUN, "--workload", "{tmp}/list-line.jsonl"], 2),
    # output files of report and export
    ("report-output-in-proc", ["report", "-o", "/proc/kvbench-x.html", "{tmp}/missing"], 2),
    ("export-output-in-proc",
     ["export", "--format", "csv", "-o", "/proc/kvbench-x.json", "{tmp}/missing"], 2),
    # sweeps
    ("sweep-toml-bad-strategy", ["sweep", "{tmp}/bad-strategy.toml"], 2),
]

# What the one line must say, where the case's point is the message: the field at fault, the
# trace line and the limit.
MESSAGES: dict[str, str] = {
    "trace-prompt-of-a-billion-tokens":
        "huge-prompt.jsonl:1: prompt_len 1,000,000,000 is more than 16,777,216",
    "trace-output-of-a-billion-tokens":
        "huge-output.jsonl:2: output_len 1,000,000,000 is more than 16,777,216",
    "csv-trace-prompt-of-a-billion-tokens":
        "huge-prompt.csv:3: ContextTokens 1,000,000,000 is more than 16,777,216",
    "num-requests-a-trillion": "--num-requests: 1,000,000,000,000 requests need at least",
    "simulate-num-requests-a-trillion": "--num-requests: 1,000,000,000,000 requests",
    "warmup-a-trillion": "--warmup: 1,000,000,000,000 requests",
    "max-num-seqs-a-billion": "use --max-num-seqs",
    "simulate-max-num-seqs-a-billion": "use a smaller --max-num-seqs (the 1,000,000,000 given",
    "simulate-70b-on-an-l4": "--tensor-parallel-size or a smaller model",
    "seed-past-64-bits": "--seed must be an integer in [-2**63, 2**63 - 1]",
    "simulate-seed-past-64-bits": "--seed must be an integer in",
    "temperature-nan": "--temperature must be a finite number >= 0, got nan",
    "kv-scale-inf": "--kv-scale must be a finite number > 0, got inf",
    "workload-param-with-a-trace": "--workload-param prompt_len=4: a trace file takes no",
    "estimate-block-size-not-power-of-two": "--block-size must be a power of two, got 3",
    "model-folder-nan-weights": "tensor model.embed_tokens.weight holds 1 NaN",
    "jsonl-line-is-a-list": "list-line.jsonl:1: expected a JSON object, got list",
    "report-output-in-proc": "-o /proc/kvbench-x.html: folder /proc cannot be written",
    "export-output-in-proc": "-o /proc/kvbench-x.json: folder /proc cannot be written",
    "sweep-toml-bad-strategy": "unknown strategy 'nope'",
    "sweep-name-escapes": "--name '../../escape' must be a folder name",
    "sweep-name-is-a-path": "--name 'a/b' must be a folder name",
    "sweep-toml-name-escapes": "--name '../escape' must be a folder name",
    "out-empty": "--out is empty",
    "simulate-out-empty": "--out is empty",
    "sweep-out-empty": "--out is empty",
    "calibrate-out-empty": "--out is empty",
}


def _setup(tmp: Path) -> None:
    (tmp / "malformed.jsonl").write_text('{"prompt_len": 4, "output_len":\n')
    (tmp / "empty.jsonl").write_text("")
    (tmp / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp / "empty-model").mkdir()
    (tmp / "corrupt-config").mkdir()
    (tmp / "corrupt-config" / "config.json").write_text("{not json")
    weights = tmp / "corrupt-weights"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128,
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64,
    }))
    (weights / "model.safetensors").write_bytes(b"this is not a safetensors file")
    (tmp / "a-file").write_text("keep me\n")
    results = tmp / "corrupt-results"
    results.mkdir()
    (results / "kvbench_summary.json").write_text('{"label": ')
    (tmp / "gpu.txt").write_text("name = 'x'\n")
    (tmp / "garbage.toml").write_text("this = is = not toml\n")
    (tmp / "incomplete.toml").write_text('name = "half a gpu"\n')
    good_line = '{"prompt_len": 4, "output_len": 2}\n'
    (tmp / "good.jsonl").write_text(good_line)
    (tmp / "huge-prompt.jsonl").write_text('{"prompt_len": 1000000000, "output_len": 5}\n')
    (tmp / "huge-output.jsonl").write_text(good_line + '{"prompt_len": 4, "output_len": 1e9}\n')
    (tmp / "huge-prompt.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,2\n"
        "2023-11-16 18:15:47,1000000000,2\n")
    (tmp / "list-line.jsonl").write_text('[{"prompt_len": 4, "output_len": 2}]\n')
    (tmp / "bad-strategy.toml").write_text(
        f'kind = "simulate"\nout = "{tmp / "sweeps"}"\n[base]\nmodel = "llama-2-7b"\n'
        'num-requests = 4\n[axes]\nstrategy = ["paged", "nope"]\n')
    (tmp / "escape.toml").write_text(
        f'kind = "simulate"\nname = "../escape"\nout = "{tmp / "sweeps"}"\n[base]\n'
        'model = "llama-2-7b"\nnum-requests = 4\n[axes]\nstrategy = ["paged"]\n')
    nan_weights = tmp / "nan-weights"
    nan_weights.mkdir()
    (nan_weights / "config.json").write_text((weights / "config.json").read_text())
    embed = torch.zeros(128, 32)
    embed[1, 2] = math.nan
    save_file({"model.embed_tokens.weight": embed}, str(nan_weights / "model.safetensors"))


def _fill(arg: str, tmp: Path) -> str:
    return arg.replace("{tmp}", str(tmp))


@pytest.mark.parametrize(("case", "command", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_writes_nothing(case, command, code, tmp_path, capsys):
    _setup(tmp_path)
    out = tmp_path / "out"
    argv = [_fill(a, tmp_path) for a in command]
    if command[0] in ("run", "simulate") and "--out" not in command:
        argv += ["--out", str(out)]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("kvbench: error: ")
    assert MESSAGES.get(case, "") in lines[0]
    assert "Traceback" not in captured.err + captured.out
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before  # nothing written, not even an empty --out folder
    assert (tmp_path / "a-file").read_text() == "keep me\n"


def test_the_catalogue_names_each_case_once():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert set(MESSAGES) <= set(ids)


def test_a_billion_token_prompt_is_refused_in_under_a_second(tmp_path, capsys):
    """The trace line is refused from its text: nothing of the prompt is built (it used to
    grow to 23 GB and be killed by the kernel)."""
    _setup(tmp_path)
    out = str(tmp_path / "out")
    main([*RUN, "--workload", str(tmp_path / "empty.jsonl"), "--out", out])  # imports done
    capsys.readouterr()
    start = time.perf_counter()
    code = main([*RUN, "--workload", str(tmp_path / "huge-prompt.jsonl"), "--out", out])
    elapsed_s = time.perf_counter() - start
    assert code == 2 and elapsed_s < 1.0
    assert "prompt_len 1,000,000,000" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [
    ["report", "-o", "{dir}/x.html", "{tmp}/missing"],
    ["export", "--format", "csv", "-o", "{dir}/x.json", "{tmp}/missing"],
])
def test_output_into_a_read_only_folder_is_one_line(command, tmp_path, capsys, monkeypatch):
    """A read-only mount (errno 30) cannot be made as root with chmod: its refusal of every
    new file is what the test reproduces."""
    folder = tmp_path / "read-only"
    folder.mkdir()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("kvbench.results.files.tempfile.mkstemp", read_only)
    argv = [a.replace("{dir}", str(folder)).replace("{tmp}", str(tmp_path)) for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "cannot be written: Read-only file system" in err
    assert list(folder.iterdir()) == []


def test_sweep_on_ray_without_ray_is_one_line_and_writes_nothing(tmp_path, capsys,
                                                                 monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "sweeps"
    code = main(["sweep", "--simulate", "--model", "llama-2-7b", "--strategy", "paged",
                 "--num-requests", "2", "--executor", "ray", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--executor ray needs Ray" in err
    assert not out.exists() or list(out.rglob("*")) == []


def test_generate_names_a_token_id_past_the_vocabulary():
    import kvbench

    with pytest.raises(KvbenchInputError, match=r"prompts\[1\]\[2\] is 99999, not a token id"):
        kvbench.generate([[1, 2], [3, 4, 99999]], 3)
