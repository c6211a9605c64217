"""The failure contract (kvbench.cli.app.failure, docs/cli.md, Exit codes), command by command
and fault by fault: one `kvbench: error:` line (warnings aside), the contract's exit code, no
traceback, and nothing half-written: no results folder a reader would take as whole, no
output file, no temporary file left behind.

Each case is one row of `CASES`; a new fault or command is a new row. Faults:
- `full`: the folder `{full}` is a disk that fills once `budget` bytes are written under it.
  Where user namespaces allow it the command runs as a process on a real tmpfs of that size
  (`unshare -rm`, no root); everywhere it also runs in-process with every file opened for
  writing under `{full}` failing with ENOSPC past the budget (Python's files, and so pandas'
  and pyarrow's writes through them).
- `stdout-full`: standard output is /dev/full (`kvbench ... > /dev/full`), as a process.
- `missing:MODULE`: the optional dependency MODULE is not installed.
- None: the arguments alone are the fault (hostile counts, names, paths).
"""

from __future__ import annotations

import builtins
import errno
import functools
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.results.run_folder import is_whole

KVBENCH = [sys.executable, "-c", "import sys; from kvbench.cli import main; "
           "sys.exit(main(sys.argv[1:]))"]
SIM = ["simulate", "--model", "llama-2-7b", "--num-requests", "20", "--warmup", "0", "--quiet"]
RUN = ["run", "--num-requests", "4", "--warmup", "0", "--quiet"]
NOSPACE = "No space left on device"
LONG = "n" * 300  # past any file system's 255-byte name
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000,
         "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-5,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    code: int
    says: str = ""  # a fragment of the error line
    fault: str | None = None  # "full", "stdout-full", "missing:MODULE" or None
    budget: int = 0  # bytes the full disk takes before it refuses


CASES: list[Case] = [
    # a full disk under every command that writes a file (a run that started exits 1)
    Case("run-full-disk", [*RUN, "--out", "{full}/out"], 1, NOSPACE, "full"),
    Case("run-full-disk-mid-run", [*RUN, "--out", "{full}/out"], 1, NOSPACE, "full", 4000),
    Case("simulate-full-disk", [*SIM, "--out", "{full}/out"], 1, NOSPACE, "full"),
    Case("simulate-full-disk-mid-run", [*SIM, "--out", "{full}/out"], 1, NOSPACE, "full",
         6000),
    Case("compare-run-full-disk", [*SIM, "--strategy", "paged,contiguous", "--out",
                                   "{full}/out"], 1, NOSPACE, "full", 6000),
    Case("sweep-full-disk", ["sweep", "--simulate", "--model", "llama-2-7b", "--num-requests",
                             "8", "--strategy", "paged,contiguous", "--quiet", "--out",
                             "{full}/out"], 1, NOSPACE, "full"),
    Case("report-full-disk", ["report", "{results}", "-o", "{full}/r.html"], 2,
         f"{{full}}/r.html: {NOSPACE}", "full"),
    Case("export-csv-full-disk", ["export", "{results}", "--format", "csv", "-o",
                                  "{full}/e.csv"], 2, f"{{full}}/e.csv: {NOSPACE}", "full"),
    Case("export-vllm-full-disk", ["export", "{results}", "--format", "vllm", "-o",
                                   "{full}/e.json"], 2, f"{{full}}/e.json: {NOSPACE}", "full"),
    Case("export-vllm-sweep-full-disk", ["export", "{results}", "--format", "vllm-sweep",
                                         "-o", "{full}/sweep"], 2, NOSPACE, "full", 1000),
    # ... and under every command that prints (its stdout redirected onto a full disk)
    Case("estimate-stdout-full", ["estimate", "--model", "llama-2-7b"], 2,
         f"standard output: {NOSPACE}", "stdout-full"),
    Case("list-stdout-full", ["list"], 2, f"standard output: {NOSPACE}", "stdout-full"),
    Case("compare-stdout-full", ["compare", "{results}", "{results}"], 2,
         f"standard output: {NOSPACE}", "stdout-full"),
    Case("export-stdout-full", ["export", "{results}", "--format", "csv"], 2,
         f"standard output: {NOSPACE}", "stdout-full"),
    Case("simulate-json-stdout-full", [*SIM, "--json", "--out", "{tmp}/out"], 1,
         f"standard output: {NOSPACE}; the results are whole", "stdout-full"),
    # hostile counts: refused before any work
    Case("repeat-a-billion", [*RUN, "--repeat", "1000000000", "--out", "{tmp}/out"], 2,
         "--repeat 1,000,000,000 is more than 1,000"),
    Case("max-concurrency-past-int64", [*RUN, "--max-concurrency", "1" + "0" * 21, "--out",
                                        "{tmp}/out"], 2, "is more than 2**63 - 1"),
    Case("max-concurrency-1e21", [*RUN, "--max-concurrency", "1e21", "--out", "{tmp}/out"], 2,
         "'1e21' is not a valid integer"),
    Case("simulate-max-concurrency-past-int64",
         [*SIM, "--max-concurrency", "1" + "0" * 21, "--out", "{tmp}/out"], 2,
         "is more than 2**63 - 1"),
    Case("cpu-threads-a-thousand", [*RUN, "--cpu-threads", "1000", "--out", "{tmp}/out"], 2,
         "--cpu-threads 1,000 is more than 4 per core"),
    # names too long for the file system (ENAMETOOLONG), named in the line
    Case("run-out-name-too-long", [*RUN, "--out", f"{{tmp}}/{LONG}"], 2, "File name too long"),
    Case("simulate-out-name-too-long", [*SIM, "--out", f"{{tmp}}/{LONG}"], 2,
         "File name too long"),
    Case("sweep-name-too-long", ["sweep", "--simulate", "--model", "llama-2-7b",
                                 "--num-requests", "4", "--strategy", "paged,contiguous",
                                 "--out", "{tmp}/out", "--name", LONG], 2, "File name too long"),
    Case("report-output-name-too-long", ["report", "{results}", "-o", f"{{tmp}}/{LONG}.html"],
         2, "File name too long"),
    Case("export-output-name-too-long", ["export", "{results}", "--format", "csv", "-o",
                                         f"{{tmp}}/{LONG}.csv"], 2, "File name too long"),
    # empty outputs (an unset shell variable) are refused, not the current folder
    Case("export-output-empty", ["export", "{results}", "--format", "csv", "-o", ""], 2),
    Case("export-vllm-sweep-output-empty", ["export", "{results}", "--format", "vllm-sweep",
                                            "-o", ""], 2),
    # optional dependencies: the extra that installs them is named, the input is not blamed
    Case("tokenizer-without-transformers",
         [*RUN, "--workload", "{inputs}/sharegpt.json", "--tokenizer", "{inputs}", "--out",
          "{tmp}/out"], 2, "needs transformers, which is not installed: pip install "
         "'kvbench[hf]'", "missing:transformers"),
    Case("engine-hf-without-transformers", [*RUN, "--engine", "hf", "--out", "{tmp}/out"], 2,
         "--engine hf needs transformers, which is not installed: pip install 'kvbench[hf]'",
         "missing:transformers"),
    Case("sweep-ray-without-ray", ["sweep", "--simulate", "--model", "llama-2-7b",
                                   "--num-requests", "2", "--executor", "ray", "--out",
                                   "{tmp}/out"], 2,
         "--executor ray needs Ray, which is not installed: pip install 'kvbench[ray]'",
         "missing:ray"),
    # a file that is not text where text is read
    Case("sweep-config-binary", ["sweep", "{inputs}/binary.toml"], 2, "binary.toml"),
    # hostile model configs: refused before anything is allocated
    Case("simulate-a-trillion-layers", [*SIM[:1], "--model", "{inputs}/huge-layers", *SIM[3:],
                                        "--out", "{tmp}/out"], 2, "num_hidden_layers"),
    Case("estimate-nan-norm-eps", ["estimate", "--model", "{inputs}/nan-eps"], 2, "rms_norm_eps"),
    # hostile traces: bounded in memory and nesting, named for what they are
    Case("simulate-binary-trace", [*SIM, "--workload", "{inputs}/binary.toml", "--out",
                                   "{tmp}/out"], 2, "not a trace kvbench can read"),
    Case("simulate-nested-trace", [*SIM, "--workload", "{inputs}/nested.jsonl", "--out",
                                   "{tmp}/out"], 2, "nested too deeply"),
    # paths stay inside --out; an empty --out is refused
    Case("sweep-name-escapes-out", ["sweep", "--simulate", "--model", "llama-2-7b",
                                    "--num-requests", "2", "--name", "../../escape", "--out",
                                    "{tmp}/out"], 2, "--name"),
    Case("simulate-out-empty", [*SIM, "--out", ""], 2, "--out"),
    # (signals: Ctrl-C and SIGTERM on run, simulate and sweep are driven for real in
    # tests/session/test_runner.py and tests/cli/test_sigterm.py, through
    # tests/session/interrupted_run.py)
    # folders that are not whole, and runs of another workload
    Case("report-folder-without-steps", ["report", "{inputs}/incomplete"], 2, "steps.csv"),
    Case("export-folder-without-steps", ["export", "{inputs}/incomplete", "--format", "csv"], 2,
         "steps.csv"),
    Case("compare-another-seed", ["compare", "{results}", "{inputs}/seed-7"], 2, "seed"),
]


# -- faults -------------------------------------------------------------------------------


class FullDisk:
    """Files opened for writing under `root` fail with ENOSPC past `budget` bytes in all."""

    def __init__(self, root: Path, budget: int) -> None:
        self.root, self.budget, self.used = str(root), budget, 0

    def holds(self, file: object) -> bool:
        if isinstance(file, int):  # os.fdopen of a temporary file
            file = os.readlink(f"/proc/self/fd/{file}")
        return os.path.abspath(os.fspath(file)).startswith(self.root + os.sep)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_open = io.open

        def open_(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            if set(mode) & set("wax+") and self.holds(file):
                return _Filling(handle, self)
            return handle

        monkeypatch.setattr(io, "open", open_)
        monkeypatch.setattr(builtins, "open", open_)


class _Filling:
    """A file on a `FullDisk`: every write counts against its budget."""

    def __init__(self, handle, disk: FullDisk) -> None:
        self._handle, self._disk = handle, disk

    def write(self, data) -> int:
        if self._disk.used + len(data) > self._disk.budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._disk.used += len(data)
        return self._handle.write(data)

    def __getattr__(self, name: str):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)


def _tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True, check=False)
    return probe.returncode == 0


TMPFS = _tmpfs_works()


# -- the run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A whole results folder of one simulated run, for report, compare and export."""
    out = tmp_path_factory.mktemp("results")
    assert main([*SIM, "--num-requests", "8", "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    return folder


def _argv(case: Case, tmp: Path, full: Path, results: Path, inputs: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)).replace("{full}", str(full))
            .replace("{results}", str(results)).replace("{inputs}", str(inputs))
            for a in case.argv]


def _in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _process(argv: list[str], stdout=subprocess.PIPE, tmpfs: tuple[Path, int] | None = None):
    command = [*KVBENCH, *argv]
    if tmpfs is not None:  # a real disk, full past about `budget` bytes: tmpfs counts
        folder, budget = tmpfs  # whole pages, so one page more is mounted and filled first
        size = 4096 * (1 + -(-budget // 4096))
        command = ["unshare", "-rm", "sh", "-c",
                   f'mount -t tmpfs -o size={size} tmpfs "$0" && head -c 4096 /dev/zero '
                   f'> "$0/.filler" && exec "$@"', str(folder), *command]
    proc = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          check=False, timeout=300)
    return proc.returncode, proc.stdout or "", proc.stderr


def _check_one_line(case: Case, code: int, out: str, err: str, full: Path) -> None:
    assert code == case.code, err
    assert "Traceback" not in err + out, err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("kvbench: error: ")]
    assert len(errors) == 1 and all(
        line in errors or line.startswith("kvbench: warning: ") for line in lines), err
    assert case.says.replace("{full}", str(full)) in errors[0]


def _check_nothing_half_written(full: Path) -> None:
    """No folder a reader would take as whole, no file outside a folder marked unfinished."""
    for path in full.rglob("*"):
        assert not path.name.startswith(".kvbench-export-"), path
        if path.is_dir() and (path / "kvbench_summary.json").exists():
            assert not is_whole(path) or any(p.name.endswith(".partial")
                                             for p in path.parents), path
    files = [p for p in full.rglob("*") if p.is_file()]
    unfinished = [p for p in files if not any(q.name.endswith(".partial")
                                              for q in p.relative_to(full).parents
                                              if q.name)]
    # outside an unfinished run's folder only a sweep's own bookkeeping may stay
    assert all(p.parent.name != full.name or p.suffix not in (".html", ".csv", ".json")
               for p in unfinished), unfinished


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, results) -> Path:
    """The hostile and damaged inputs the cases read, made once: none is written to."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "binary.toml").write_bytes(bytes(range(128, 256)) * 4)
    (folder / "nested.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (folder / "sharegpt.json").write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi there"}]}]))
    for name, change in (("huge-layers", {"num_hidden_layers": 10**12}),
                         ("nan-eps", {"rms_norm_eps": float("nan")})):
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps({**LLAMA, **change}))
    shutil.copytree(results, folder / "incomplete")
    (folder / "incomplete" / "steps.csv").unlink()
    shutil.copytree(results, folder / "seed-7")
    for file, path in (("config.json", ("run", "engine")), ("kvbench_summary.json", ())):
        data = json.loads((folder / "seed-7" / file).read_text())
        functools.reduce(dict.__getitem__, path, data)["seed"] = 7
        (folder / "seed-7" / file).write_text(json.dumps(data))
    return folder


def _full(tmp: Path) -> Path:
    full = tmp / "full"
    full.mkdir()
    return full


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_failure_is_one_line_with_the_contracts_exit_code(case, tmp_path, results, inputs,
                                                               capsys, monkeypatch):
    full = _full(tmp_path)
    argv = _argv(case, tmp_path, full, results, inputs)
    if case.fault == "stdout-full":
        with open("/dev/full", "w") as stdout:
            code, out, err = _process(argv, stdout=stdout)
    else:
        if case.fault == "full":
            FullDisk(full, case.budget).install(monkeypatch)
        elif case.fault is not None:  # `import MODULE` raises ModuleNotFoundError
            monkeypatch.setitem(sys.modules, case.fault.removeprefix("missing:"), None)
        code, out, err = _in_process(argv, capsys)
        monkeypatch.undo()
    _check_one_line(case, code, out, err, full)
    _check_nothing_half_written(full)
    if case.fault is None or case.fault.startswith("missing:"):  # refused before any work
        assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


@pytest.mark.skipif(not TMPFS, reason="no user namespaces to mount a tmpfs in")
@pytest.mark.parametrize("case", [c for c in CASES if c.fault == "full"],
                         ids=[c.id for c in CASES if c.fault == "full"])
def test_a_real_full_disk_gives_the_same_answer(case, tmp_path, results, inputs):
    full = _full(tmp_path)
    code, out, err = _process(_argv(case, tmp_path, full, results, inputs),
                              tmpfs=(full, case.budget))
    _check_one_line(case, code, out, err, full)


def test_the_catalogue_names_each_case_once_and_covers_every_command():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    from kvbench.cli.app import COMMANDS

    written = {c.argv[0] for c in CASES if c.fault in ("full", "stdout-full")}
    assert set(COMMANDS) - written == {"calibrate"}  # needs CUDA to write anything


@pytest.mark.parametrize(("error", "says"), [
    (MemoryError("Unable to allocate 7.28 TiB for an array"), "out of memory: the input asks"),
    (RecursionError("maximum recursion depth exceeded"), "the input is nested too deeply"),
    (OverflowError("cannot convert float infinity to integer"), "a number in the input is out"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "is not UTF-8 text"),
], ids=["memory", "recursion", "overflow", "not-utf8"])
def test_exhaustion_by_an_input_is_one_line_and_exit_2(error, says, monkeypatch, capsys):
    """Whatever reader meets an input too large or too deep, the error reaching the top is
    one line: here a model config's reader raises it."""
    def read(*args, **kwargs):
        raise error

    monkeypatch.setattr("kvbench.cli.estimate.resolve_checkpoint", read)
    assert main(["estimate", "--model", "llama-2-7b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvbench: error: ") and says in err


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only the contract's kinds become one line: anything else is a bug to report, raised."""
    def read(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("kvbench.cli.estimate.resolve_checkpoint", read)
    with pytest.raises(ZeroDivisionError):
        main(["estimate", "--model", "llama-2-7b"])
