"""Prints the fuzz tally (cases tried and errors seen per format) at the end of any run that fuzzed,
whether or not -s was given, and stops the worker process."""
from __future__ import annotations

from . import fuzzlib


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    lines = fuzzlib.summary_lines()
    if lines:
        terminalreporter.section("ckptstat fuzz: cases and errors per format")
        for line in lines:
            terminalreporter.write_line(line)
        if config.getoption("verbose") > 0:
            for fmt, t in sorted(fuzzlib.TALLY.items()):
                for outcome, message in sorted(t.examples.items()):
                    if message:
                        terminalreporter.write_line(f"  {fmt} {outcome}: {message[:160]}")
        hits = sum(t.budget_hits for t in fuzzlib.TALLY.values())
        seeded = ("seed fixed (derandomize)" if fuzzlib.SEED is None else
                  f"seed {fuzzlib.SEED} (CKPTSTAT_FUZZ_SEED={fuzzlib.SEED} replays this run)")
        terminalreporter.write_line(f"{seeded}; examples per test: "
                                    f"{fuzzlib.EXAMPLES or 'default'} (CKPTSTAT_FUZZ_EXAMPLES); "
                                    f"value reads stopped at the per-case byte budget: {hits}")


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    fuzzlib.WORKER.stop()
