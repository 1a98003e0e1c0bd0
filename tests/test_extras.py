"""Every feature behind an extra (pyproject's optional-dependencies, README's "Extras" table), run as a
user runs it without that extra: ckptstat in a subprocess whose import system refuses the extra's modules
as an absent package does (ModuleNotFoundError naming it). The answer is one line on stderr that names
the extra to install, a non-zero exit, no traceback, nothing written. Installing each extra in a fresh
venv and running its feature is scripts/check_extras.sh (too slow for the suite)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "fixtures")
MODEL = os.path.join(FIX, "bert-tiny")

# Runs ckptstat's CLI with `blocked` (top-level package names) unimportable, as if not installed.
WRAPPER = """
import sys
blocked = set(sys.argv[1].split(","))

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from ckptstat.cli import main
sys.exit(main(sys.argv[2:]))
"""

# (extra, a module of it that ckptstat imports, what is run, the command line)
CASES = [
    ("dask", "distributed", "audit --scheduler", ["audit", MODEL, "--out", "{tmp}/r.jsonl", "--no-progress",
                                                  "--scheduler", "tcp://127.0.0.1:9"]),
    ("dask", "distributed", "stats --scheduler", ["stats", MODEL, "--no-progress", "--scheduler", "tcp://127.0.0.1:9"]),
    ("dask", "dask", "stats --scheduler", ["stats", MODEL, "--no-progress", "--scheduler", "tcp://127.0.0.1:9"]),
    ("parquet", "pyarrow", "audit --out .parquet", ["audit", MODEL, "--out", "{tmp}/r.parquet", "--no-progress"]),
    ("remote", "fsspec", "https://", ["summary", "https://127.0.0.1:9/model.safetensors"]),
    ("remote", "aiohttp", "https://", ["summary", "https://127.0.0.1:9/model.safetensors"]),
    ("remote", "fsspec", "s3://", ["tensors", "s3://bucket/model.safetensors"]),
    ("remote", "s3fs", "s3://", ["tensors", "s3://bucket/model.safetensors"]),
    ("remote", "s3fs", "audit s3://", ["audit", "s3://bucket/zoo", "--out", "{tmp}/r.jsonl", "--no-progress"]),
    ("remote", "huggingface_hub", "hf://", ["summary", "hf://org/model"]),
    ("run", "torch", "run", ["run", MODEL, "--seq", "4"]),
    ("zstd", "zstandard", "DCP stream.zstd/1 values", ["stats", os.path.join(FIX, "dcp", "zstd"), "--no-progress"]),
    ("zstd", "zstandard", "orbax", ["summary", os.path.join(FIX, "orbax", "train")]),
    ("zstd", "zstandard", "orbax, folder per array", ["stats", os.path.join(FIX, "orbax", "no-ocdbt"), "--no-progress"]),
    ("run", "transformers", "run", ["run", MODEL, "--seq", "4"]),
]


def test_every_user_extra_is_tested():
    """The extras a user installs for a feature are the CASES' extras; the rest build fixtures, run
    benchmarks or the tests, and say so in their names."""
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    user = {e for e in extras if not e.endswith(("-fixtures", "-compare")) and e != "test"}
    assert user == {c[0] for c in CASES}
    for extra, module, _, _ in CASES:   # each case's module is one the extra installs
        assert any(dep.split("[")[0].split(">")[0].split("=")[0].split("<")[0].replace("-", "_").strip() == module
                   or module == "dask" for dep in extras[extra]), (extra, module)


@pytest.mark.parametrize("extra, module, argv", [pytest.param(e, m, a, id=f"{e}-{w}-{m}") for e, m, w, a in CASES])
def test_missing_extra_is_one_line_naming_it(extra, module, argv, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    r = subprocess.run([sys.executable, "-c", WRAPPER, module, *argv], capture_output=True, text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("ckptstat: error: ") and f"pip install 'ckptstat[{extra}]'" in lines[0], lines[0]
    assert f"({module} is not installed)" in lines[0], lines[0]
    assert os.listdir(tmp_path) == []   # nothing written


def test_another_librarys_multi_line_message_reads_on_one_line():
    """An exception that is not ckptstat's (here from a third-party library) printed by the boundary:
    its lines joined, no literal \\x0a; a file-derived newline in ckptstat's own message stays shown."""
    from ckptstat.commands.quick import _line
    from ckptstat.errors import CheckpointError

    msg = "No clients found\nStart a client and point it to the scheduler address\n  from distributed import Client"
    assert _line(ValueError(msg)) == ("No clients found Start a client and point it to the scheduler address "
                                      "from distributed import Client")
    assert _line(CheckpointError("a\nb.safetensors", "bad")) == "a\\x0ab.safetensors: bad"
