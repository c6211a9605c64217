"""Every `kvbench ...` command in README.md and docs/*.md, and the TOML files they show, runs:
exit 0, or the exit the docs give for it on this machine.

Commands are read from the fenced code blocks (a `$ ` prompt and `\\` continuations are
understood; what precedes `kvbench` on a line, like `pip install ... &&` or `nsys profile`,
is dropped). Placeholders (`results/RUN`, `trace.jsonl`, `./my-hf-llama`, ...) become small
real files. `run` and `simulate` get `--num-requests 4 --warmup 0` and a scratch `--out`;
`simulate` and the README's first command run; the other `run` commands (the model on the
CPU: seconds to a minute each) are planned, not run: every input is checked and every engine
built (`plan_session`), so a wrong option still fails. Sweeps run with `--dry-run`, which
checks every point's options.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

import kvbench.session.session
from kvbench.cli import main
from tests.conftest import make_word_tokenizer

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DATA = ROOT / "tests" / "workloads" / "data"
COMMANDS = ("run", "simulate", "estimate", "report", "compare", "sweep", "list")

# Lines that show a pattern, not a command to copy.
PATTERNS = {"kvbench sweep <same options> --name NAME --resume"}


@dataclass(frozen=True)
class Example:
    where: str  # file:line
    argv: tuple[str, ...]


def _blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line number, body) of each fenced block."""
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        found.append((m.group(1), text[: m.start()].count("\n") + 2, m.group(2)))
    return found


def doc_examples() -> list[Example]:
    examples = []
    for path in DOCS:
        for lang, first, body in _blocks(path.read_text(encoding="utf-8")):
            if lang not in ("", "bash", "sh", "console"):
                continue
            lines = body.splitlines()
            i = 0
            while i < len(lines):
                number, line = first + i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                text = line.strip().removeprefix("$ ")
                m = re.search(r"(?:^|\s|&&\s*)kvbench (\w+)", text)
                if m is None or m.group(1) not in COMMANDS:
                    continue
                if lang == "" and not (line.strip().startswith(("kvbench ", "$ kvbench "))):
                    continue
                command = text[m.start():].lstrip("& ").strip()
                if command.split(" #")[0].strip() in PATTERNS:
                    continue
                argv = shlex.split(command, comments=True)[1:]
                argv = [a for a in argv if not (a.startswith("[") or a.endswith("]")
                                               or a == "...")]  # [optional ...] usage
                examples.append(Example(f"{path.relative_to(ROOT)}:{number}", tuple(argv)))
    return examples


def toml_blocks(path: Path) -> list[str]:
    return [body for lang, _, body in _blocks(path.read_text(encoding="utf-8"))
            if lang == "toml"]


EXAMPLES = doc_examples()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The real files behind the docs' placeholders."""
    tmp = tmp_path_factory.mktemp("docs")
    found: dict[str, Path] = {}
    out = tmp / "fixture-results"
    assert main(["simulate", "--model", "llama-2-7b", "--num-requests", "4", "--warmup", "0",
                 "--strategy", "contiguous,paged", "--out", str(out), "--quiet"]) == 0
    (comparison,) = out.iterdir()
    found["results"] = comparison
    trace = tmp / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_len": 16 + i,
                                         "output_len": 8}) + "\n" for i in range(6)))
    found["trace"] = trace
    found["sweep_toml"] = tmp / "sweep.toml"
    found["sweep_toml"].write_text(toml_blocks(ROOT / "docs" / "sweep.md")[0])
    return found


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests.conftest import make_hf_checkpoint

    folder = tmp_path_factory.mktemp("my-hf-llama")
    make_hf_checkpoint(folder, "gqa4-tied")
    return folder


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory) -> Path:
    return make_word_tokenizer(tmp_path_factory.mktemp("tokenizer"),
                               (DATA / "sharegpt.json").read_text())


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    if flag in argv:
        argv = list(argv)
        argv[argv.index(flag) + 1] = value
        return argv
    return [*argv, flag, value]


def _substitute(argv: list[str], request, tmp: Path) -> list[str]:
    files = request.getfixturevalue("files")
    out = []
    for arg in argv:
        if arg == "results/NAME":
            arg = str(_finished_sweep(tmp))
        elif re.fullmatch(r"(results/[A-Z]+|[A-Z]+_DIR|results/\d{8}-\d{6}-[\w-]+)", arg):
            arg = str(files["results"])
        elif arg in ("trace.jsonl", "path/to/trace.jsonl"):
            arg = str(files["trace"])
        elif arg == "mooncake_trace.jsonl":
            arg = str(DATA / "mooncake.jsonl")
        elif arg == "ShareGPT_V3_unfiltered_cleaned_split.json":
            arg = str(DATA / "sharegpt.json")
        elif arg == "path/to/model":
            arg = str(request.getfixturevalue("tokenizer_folder"))
        elif arg == "./my-hf-llama":
            arg = str(request.getfixturevalue("hf_folder"))
        elif arg.endswith(".toml") and arg != "FILE.toml":
            arg = str(files["sweep_toml"])
        out.append(arg)
    return out


def _finished_sweep(tmp: Path) -> Path:
    """A complete sweep folder: given alone, `kvbench sweep FOLDER` finds nothing to run."""
    args = ["sweep", "--simulate", "--model", "llama-2-7b", "--num-requests", "4",
            "--warmup", "0", "--strategy", "contiguous,paged", "--out", str(tmp / "sw"),
            "--name", "NAME", "--quiet"]
    assert main(args) == 0
    return tmp / "sw" / "NAME"


def expected_exit(argv: list[str]) -> int:
    import torch

    if "--gpu-memory-utilization" in argv and not torch.cuda.is_available():
        return 2  # README: a CUDA option; off CUDA it is refused in one line
    return 0


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_doc_example_runs(example: Example, request, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # relative results/ and -o files land in the scratch folder
    argv = _substitute(list(example.argv), request, tmp_path)
    command = argv[0]
    if command in ("run", "simulate"):
        argv = _set(_set(argv, "--num-requests", "4"), "--warmup", "0")
        argv = _set(argv, "--out", str(tmp_path / "out"))
        if "--json" not in argv:
            argv.append("--quiet")
        if command == "run" and example != EXAMPLES[0]:
            _plan_only(monkeypatch)  # the model on the CPU: seconds to a minute each
    elif command == "sweep" and not Path(argv[1]).is_dir():
        argv.append("--dry-run")
    code = main(argv)
    captured = capsys.readouterr()
    assert code == expected_exit(argv), f"{example.where}: kvbench {shlex.join(argv)}\n" \
                                        f"{captured.err}"
    assert "Traceback" not in captured.err


def _plan_only(monkeypatch) -> None:
    """Check every input and build every engine, but run nothing."""
    def run_session(plan, **_kwargs):
        return kvbench.session.session.SessionResult(plan.root, [], [])

    monkeypatch.setattr(kvbench.session.session, "run_session", run_session)


def test_the_docs_have_examples_and_the_extraction_finds_them():
    where = {e.where.split(":")[0] for e in EXAMPLES}
    assert {"README.md", "docs/findings.md", "docs/sweep.md", "docs/estimate.md",
            "docs/workloads.md"} <= where
    assert any(e.argv[:2] == ("sweep", "--simulate") and "--search" in e.argv
               for e in EXAMPLES if e.where.startswith("docs/sweep.md"))


def test_the_gpu_spec_example_file_simulates(tmp_path, capsys):
    (spec,) = toml_blocks(ROOT / "docs" / "simulator.md")
    path = tmp_path / "lab-a100.toml"
    path.write_text(spec)
    assert main(["simulate", "--gpu-spec", str(path), "--model", "llama-2-7b",
                 "--num-requests", "4", "--warmup", "0", "--tensor-parallel-size", "2",
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert main(["estimate", "--model", "llama-2-7b", "--gpu-spec", str(path),
                 "--step", "decode:32x1024"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_sweep_example_file_is_a_valid_grid(tmp_path, capsys):
    (spec,) = toml_blocks(ROOT / "docs" / "sweep.md")
    path = tmp_path / "a100-13b.toml"
    path.write_text(spec)
    assert main(["sweep", str(path), "--dry-run"]) == 0
    points = capsys.readouterr().out.split()
    assert len(points) == 3 * 4 * 2  # strategy x request-rate x output_mean
