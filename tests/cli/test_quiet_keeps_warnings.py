"""`--quiet` silences progress and the summary table, never a warning (docs/cli.md): a
script that runs `kvbench run --quiet` still learns that an option was ignored or its
requests were clipped."""

from __future__ import annotations

from kvbench.cli import main

SIM = ["simulate", "--model", "llama-2-7b", "--warmup", "0", "--num-requests", "4"]


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kvbench: warning:")]


def test_quiet_still_prints_the_ignored_block_size_warning(tmp_path, capsys):
    assert main([*SIM, "--strategy", "contiguous", "--block-size", "32", "--quiet",
                 "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert _warnings(captured.err) == [
        "kvbench: warning: --block-size 32 is ignored: no strategy listed uses blocks "
        "(contiguous reserves whole ranges)"]
    (folder,) = tmp_path.iterdir()
    assert captured.out.strip() == str(folder)  # quiet: the folder and nothing else


def test_quiet_still_prints_the_clipping_warning(tmp_path, capsys):
    assert main([*SIM, "--strategy", "paged", "--workload", "uniform",
                 "--workload-param", "prompt_len=300", "--workload-param", "output_len=20",
                 "--max-model-len", "256", "--quiet", "--out", str(tmp_path)]) == 0
    assert _warnings(capsys.readouterr().err) == [
        "kvbench: warning: 4 of 4 requests clipped to --max-model-len 256 "
        "(output shortened first, then the prompt's end)"]


def test_json_output_keeps_warnings_off_stdout(tmp_path, capsys):
    import json

    assert main([*SIM, "--strategy", "contiguous", "--block-size", "32", "--json",
                 "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["completed"] == 4  # stdout stays parseable
    assert len(_warnings(captured.err)) == 1
