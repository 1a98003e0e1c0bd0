import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")


def fixture(*parts: str) -> str:
    return os.path.join(FIXTURES, *parts)


@pytest.fixture(scope="session")
def expected_st() -> dict:
    with open(fixture("expected_safetensors.json")) as f:
        return json.load(f)


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from ckptstat.cli import main

    def run(*args: str):
        rc = main(list(args))
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def pytest_collection_modifyitems(config, items):
    """The transformers 5 gaps not yet fixed (tests/known_gaps.py): xfail, with the reason, not hidden."""
    from known_gaps import GAPS

    for item in items:
        reason = GAPS.get(item.nodeid)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
