"""Run progress: a tqdm bar with an ETA on a terminal, plain periodic lines off one."""

from __future__ import annotations

import io

from kvbench.session.progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_plain_lines_every_ten_seconds_or_tenth():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(100, "paged", enabled=True, stream=stream, clock=clock)
    for done in range(1, 9):  # 8 requests in the first 8 s: nothing yet
        clock.now += 1.0
        progress.update(done, tokens=done * 50, kv_used=0.25)
    assert stream.getvalue() == ""
    clock.now += 2.0  # 10 s: the first line
    progress.update(10, tokens=1000, kv_used=0.5)
    clock.now += 0.5  # a new tenth, but too soon after the last line
    progress.update(20, tokens=2000, kv_used=0.5)
    clock.now += 1.5  # a new tenth 2 s later: a line
    progress.update(30, tokens=3000, kv_used=0.5)
    clock.now += 9.0  # same tenth, 9 s later: quiet
    progress.update(31, tokens=3100, kv_used=0.5)
    clock.now += 1.0  # 10 s since the last line: a line
    progress.update(32, tokens=3200, kv_used=None)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines == [
        "paged: 10/100 requests (10%), 100.0 tok/s, KV 50.0%, 00:10 elapsed, ETA 01:30",
        "paged: 30/100 requests (30%), 250.0 tok/s, KV 50.0%, 00:12 elapsed, ETA 00:28",
        "paged: 32/100 requests (32%), 145.5 tok/s, 00:22 elapsed, ETA 00:46",
    ]
    assert "\r" not in stream.getvalue()


def test_disabled_progress_writes_nothing():
    stream, clock = Terminal(), FakeClock()
    progress = Progress(10, "paged", enabled=False, stream=stream, clock=clock)
    clock.now += 60
    progress.update(5, 500, 0.5)
    progress.close()
    assert stream.getvalue() == ""


def test_on_a_terminal_a_bar_with_eta_that_clears_itself(monkeypatch):
    monkeypatch.setattr("kvbench.session.progress.BAR_DELAY_S", 0.0)
    stream = Terminal()
    progress = Progress(4, "prefix", enabled=True, stream=stream)
    progress.update(1, 100, 0.5)
    progress._bar.refresh()
    shown = stream.getvalue().split("\r")[-1]
    assert shown.startswith("prefix:") and "1/4 [" in shown and "KV 50.0%" in shown
    assert "<" in shown  # elapsed<remaining: tqdm's ETA
    progress.update(4, 400, 0.5)
    progress.close()
    assert stream.getvalue().endswith("\r") and not stream.getvalue().split("\r")[-2].strip()


def test_on_a_terminal_a_short_run_shows_no_bar():
    stream = Terminal()
    progress = Progress(4, "prefix", enabled=True, stream=stream)
    progress.update(4, 400, 0.5)
    progress.close()
    assert stream.getvalue() == ""


def test_no_kv_figure_for_an_engine_without_a_kv_arena():
    # transformers' generate() keeps its own cache: its steps report the KV bytes as NaN.
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(4, "hf-generate", enabled=True, stream=stream, clock=clock)
    clock.now += 10.0
    progress.update(2, tokens=100, kv_used=float("nan"))
    progress.close()
    assert stream.getvalue() == "hf-generate: 2/4 requests (50%), 10.0 tok/s, 00:10 elapsed, " \
                                "ETA 00:10\n"
    terminal = Terminal()
    bar = Progress(4, "hf-generate", enabled=True, stream=terminal, clock=clock)
    clock.now += 10.0
    bar.update(1, tokens=50, kv_used=float("nan"))
    assert bar._bar.postfix == "5.0 tok/s"
    bar.close()


def test_due_says_when_an_update_would_show_something():
    # Off a terminal: due exactly when `update` writes a line (the caller's figures are
    # gathered only then).
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(100, "paged", enabled=True, stream=stream, clock=clock)
    for done, step_s in [(1, 1.0), (5, 8.5), (10, 0.5), (20, 0.5), (30, 1.5), (31, 9.0),
                         (32, 1.0)]:
        clock.now += step_s
        before = stream.getvalue()
        due = progress.due(done)
        progress.update(done, tokens=done * 10, kv_used=0.5)
        assert due == (stream.getvalue() != before), (done, due)
    # On a terminal: the bar's figures at most every BAR_EVERY_S.
    bar = Progress(100, "paged", enabled=True, stream=Terminal(), clock=clock)
    assert bar.due(1)
    bar.update(1, 10, 0.5)
    assert not bar.due(2)
    clock.now += 0.05
    assert not bar.due(2)
    clock.now += 0.06
    assert bar.due(2)
    bar.close()
    assert not Progress(10, "paged", enabled=False, stream=Terminal(), clock=clock).due(1)
