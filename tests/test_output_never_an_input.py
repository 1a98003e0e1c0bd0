"""An output (-o / --out) is never a file the command read: a sharded checkpoint's index and the config.json read
beside the weights count as inputs, not only the weights files. diff, trend and audit overwrote them (a report
in place of model.safetensors.index.json or config.json: the checkpoint no longer opened), since they checked the
output against the weights files alone."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from conftest import fixture

SHARDED = fixture("llama-tiny-sharded")   # transformers' save_pretrained(max_shard_size=...): index, shards, config


def _digests(folder) -> dict[str, str]:
    return {n: hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest() for n in sorted(os.listdir(folder))}


@pytest.fixture
def run(tmp_path):
    """A training run's folder of two checkpoint-N steps, each the sharded model."""
    for step in (1, 2):
        shutil.copytree(SHARDED, tmp_path / "run" / f"checkpoint-{step}")
    return tmp_path / "run"


def _command(name: str, step: str, other: str, out: str) -> list[str]:
    return {"diff-json": ["diff", step, other, "--json", "-o", out],
            "diff-html": ["diff", step, other, "--format", "html", "-o", out],
            "trend": ["trend", os.path.dirname(step), "--json", "-o", out],
            "audit": ["audit", os.path.dirname(step), "--out", out]}[name]


@pytest.mark.parametrize("target", ["model.safetensors.index.json", "config.json"])
@pytest.mark.parametrize("name", ["diff-json", "diff-html", "trend", "audit"])
def test_an_output_naming_an_index_or_config_read_is_refused(cli, run, name, target) -> None:
    step, other = str(run / "checkpoint-1"), str(run / "checkpoint-2")
    before = _digests(step)
    rc, out, err = cli(*_command(name, step, other, os.path.join(step, target)))
    assert rc == 2 and out == "", (rc, err)
    assert err.count("\n") == 1 and "is an input" in err and "refusing to overwrite it" in err, err
    assert _digests(step) == before
    assert not [n for n in os.listdir(step) if n.endswith(".tmp")]
    rc, _, err = cli("--json", step)   # the checkpoint still opens
    assert rc == 0, err
