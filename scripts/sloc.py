"""Lines of library source per package: all lines, and those that are neither blank nor comments.

Docstrings count as source (a reader carries them). Usage: `python scripts/sloc.py [ROOT]`
prints one row per package and the total.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOP_LEVEL = ("strategies", "kernels", "workloads")


def line_counts(path: Path) -> tuple[int, int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    code = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))
    return len(lines), code


def packages(root: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    kvbench = root / "kvbench"
    for path in sorted(kvbench.glob("*.py")):
        found.setdefault("kvbench/*.py", []).append(path)
    for folder in sorted(p for p in kvbench.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        found[f"kvbench/{folder.name}"] = sorted(folder.rglob("*.py"))
    for name in TOP_LEVEL:
        found[name] = sorted((root / name).rglob("*.py"))
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    print(f"{'package':<22} {'lines':>7} {'code':>7}")
    totals = [0, 0]
    for name, files in packages(root).items():
        counts = [line_counts(path) for path in files]
        row = [sum(c[0] for c in counts), sum(c[1] for c in counts)]
        totals = [totals[0] + row[0], totals[1] + row[1]]
        print(f"{name:<22} {row[0]:>7} {row[1]:>7}")
    print(f"{'total':<22} {totals[0]:>7} {totals[1]:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
