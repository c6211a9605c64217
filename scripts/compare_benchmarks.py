"""Compare two pytest-benchmark JSON files; exit 1 when a case's mean regressed past a limit.

usage: python scripts/compare_benchmarks.py BASELINE.json NEW.json [--max-regression 0.10]
"""

from __future__ import annotations

import argparse
import json
import sys


def means(path: str) -> dict[str, float]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return {b["fullname"]: b["stats"]["mean"] for b in data["benchmarks"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("baseline")
    parser.add_argument("new")
    parser.add_argument("--max-regression", type=float, default=0.10)
    args = parser.parse_args(argv)
    base, new = means(args.baseline), means(args.new)
    failed = []
    for name in sorted(base.keys() & new.keys()):
        change = new[name] / base[name] - 1
        mark = "REGRESSED" if change > args.max_regression else ""
        print(f"{change:+8.1%}  {name}  {mark}")
        if mark:
            failed.append(name)
    for name in sorted(base.keys() - new.keys()):
        print(f"   gone   {name}")
    if failed:
        print(f"{len(failed)} case(s) slower than the baseline by more than "
              f"{args.max_regression:.0%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
