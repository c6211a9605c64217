"""The walk of one kvbench command through the packages docs/design.md draws ("The walk of
one `kvbench run`"): each call from one of those packages into another, the first time it
happens, in order. Usage: `python scripts/walk.py run --strategy paged --num-requests 4
--out /tmp/walk` (any `kvbench` arguments)."""

from __future__ import annotations

import sys

WALK = ("cli", "session", "build", "engine", "results", "report")


def _package(frame) -> str | None:
    parts = frame.f_globals.get("__name__", "").split(".")
    return parts[1] if parts[0] == "kvbench" and len(parts) > 1 and parts[1] in WALK else None


def main(argv: list[str]) -> int:
    seen: dict[tuple[str | None, str], str] = {}

    def profile(frame, event, arg) -> None:
        callee = _package(frame)
        if event != "call" or callee is None or frame.f_code.co_name == "<module>":
            return
        caller = frame.f_back
        while caller is not None and _package(caller) is None:
            caller = caller.f_back
        edge = (_package(caller) if caller is not None else None, callee)
        if edge[0] != callee and edge not in seen:
            seen[edge] = f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"

    from kvbench.cli.app import main as kvbench_main

    sys.setprofile(profile)
    try:
        kvbench_main(argv)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    for (caller, callee), where in seen.items():
        print(f"{caller} -> {callee}: {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
