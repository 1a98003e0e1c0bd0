"""The CLI as a process, the way a user runs it: a results file that a killed `audit` left half-written, resumed;
tables on a terminal narrower than their numbers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import fixture


def _ckptstat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def _lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]   # every line one JSON record: what jq and pandas read


def test_audit_resumed_after_a_torn_last_line_writes_whole_lines(tmp_path):
    """A run killed mid-write leaves half a line at the end. The re-run appended its first record right after it, one
    line of two halves that parses as neither: that record lost (audited again on every run) and the file no longer
    JSON Lines. The half line is cut off before appending."""
    zoo = tmp_path / "zoo"
    for name in ("bert-tiny", "gpt2-tiny", "llama-tiny-sharded"):
        shutil.copytree(fixture(name), zoo / name)
    out = tmp_path / "results.jsonl"
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    first = _lines(out)
    assert len(first) == 3
    data = out.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    out.write_bytes(data[: last + 40])   # the last record's first 40 bytes, no newline: killed while writing it
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["run"]["audited"] == 1
    again = _lines(out)
    assert sorted(x["path"] for x in again) == sorted(x["path"] for x in first)
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress", "--json")
    assert json.loads(r.stdout)["run"]["audited"] == 0 and len(_lines(out)) == 3


def test_a_narrow_terminal_never_cuts_a_number(tmp_path):
    """COLUMNS=40: the numbers beside the names need more than the terminal has once the names are elided to the
    least. rich then cut every column to fit (dtype `F3`, numel `3` for 32, shape `100` for 1000x64); now the table
    is as wide as its numbers and printed uncropped, the terminal wrapping its rows."""
    from safetensors import safe_open

    path = os.path.join(fixture("bert-tiny"), "model.safetensors")
    r = _ckptstat("tensors", path, env={"COLUMNS": "40"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rule = next(i for i, x in enumerate(lines) if x.strip().startswith("─"))
    rows = [line.split() for line in lines[rule + 1:] if line.strip()]   # name, bucket, dtype, shape, numel, bytes (2)
    with safe_open(path, framework="numpy") as f:   # the library's own reading of the file
        want = sorted((f.get_slice(k).get_dtype(), "x".join(map(str, f.get_slice(k).get_shape())),
                       f"{int(np.prod(f.get_slice(k).get_shape())):,}") for k in f.keys())
    assert sorted((row[-5], row[-4], row[-3]) for row in rows) == want


def test_audit_of_a_root_that_is_not_there_writes_nothing(tmp_path):
    """`audit /mnt/zo --out zoo.jsonl` (a typo): the results file was made holding one error record and the run went
    on to its summary table. Like every command given a path that is not there, one line and exit 1; nothing
    written, an existing results file left as it was. (A stale line of @list.txt is still a record: test_audit.py.)"""
    missing = tmp_path / "zo"
    assert not os.path.lexists(missing)
    out = tmp_path / "zoo.jsonl"
    r = _ckptstat("audit", str(missing), "--out", str(out))
    assert (r.returncode, r.stdout) == (1, "") and not out.exists()
    assert r.stderr.count("\n") == 1 and "no such file or folder" in r.stderr and "Traceback" not in r.stderr
    out.write_bytes(b'{"path": "earlier"}\n')
    assert _ckptstat("audit", str(missing), "--out", str(out), "--json").returncode == 1
    assert out.read_bytes() == b'{"path": "earlier"}\n'


def test_run_of_a_config_without_architectures_builds_the_head_the_file_holds(tmp_path):
    """A config.json with no `architectures` (or a custom class transformers lacks) beside a causal LM's weights:
    `run` built AutoModel's class, a bare LlamaModel, leaving the file's lm_head unused, and reported its FLOPs 46%
    below the analytic ones, which count the head. Oracle: transformers' AutoModelForCausalLM.from_pretrained of the
    folder, its forward counted by torch's FlopCounterMode."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000)
    torch.manual_seed(0)
    folder = tmp_path / "llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    for archs in (None, ["MyLlamaForCausalLM"]):
        if archs is None:
            config.pop("architectures", None)
        else:
            config["architectures"] = archs
        (folder / "config.json").write_text(json.dumps(config))
        oracle = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            oracle(input_ids=torch.zeros((1, 8), dtype=torch.long))
        r = _ckptstat("run", str(folder), "-s", "8", "--iters", "1", "--warmup", "0", "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["model_class"] == type(oracle).__name__
        assert got["flops"]["measured"] == counter.get_total_flops() == got["flops"]["analytic"]


def _children(pid: int) -> list[str]:
    """The command lines of `pid`'s child processes (/proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(cmd)
    return out


def _ctrl_c_once(args: list[str], ready) -> subprocess.CompletedProcess:
    """Run ckptstat in its own process group and press Ctrl-C (SIGINT to the whole group, as a terminal sends it)
    as soon as `ready(child command lines)` holds."""
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-m", "ckptstat", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    while p.poll() is None and not ready(_children(p.pid)):
        time.sleep(0.005)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, process groups")
def test_ctrl_c_during_stats_workers_prints_no_traceback(tmp_path):
    """Ctrl-C during `stats --workers 2`: the forked workers, with the parent's handlers, printed KeyboardInterrupt
    and (stopped with SIGTERM, cli.py's handler) SystemExit tracebacks under the parent's exit 130."""
    path = tmp_path / "big.safetensors"
    rng = np.random.default_rng(0)
    from safetensors.numpy import save_file

    save_file({f"layers.{i}.weight": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(16)}, str(path))
    r = _ctrl_c_once(["stats", str(path), "--workers", "2", "--chunk-bytes", "65536", "--no-progress"],
                     lambda kids: len(kids) >= 2)
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr
