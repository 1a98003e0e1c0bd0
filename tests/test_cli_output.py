"""CLI output that reads well (issue 13): names elided, never wrapped, at 80 columns and when piped;
empty answers said and given an exit status; a mistyped command answered with the nearest one; one
default sequence length, printed; progress drawn by the CLI from the library's callback."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import fixture
from typer.testing import CliRunner

from ckptstat.cli import app
from ckptstat.render.names import ELLIPSIS, elide

BERT = fixture("bert-tiny")
LLAMA = fixture("llama-tiny-sharded")


def _write(path, tensors: dict[str, np.ndarray]) -> str:
    """A safetensors file written by hand (F32 only): header, then the data in order."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return str(path)


LONG = [f"bert.encoder.layer.{i}.attention.output.{leaf}" for i in (0, 1) for leaf in
        ("dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias")]
UNPLACED = ["adapters.task_specific_adapter_for_sentiment_classification.down_projection.weight",
            "adapters.task_specific_adapter_for_sentiment_classification.up_projection.weight"]


@pytest.fixture
def long_names(tmp_path) -> str:
    rng = np.random.default_rng(0)
    t = {n: rng.standard_normal((8, 8) if n.endswith("dense.weight") else (8,)) for n in LONG}
    t.update({n: rng.standard_normal((4, 8)) for n in UNPLACED})
    t["bert.embeddings.word_embeddings.weight"] = rng.standard_normal((16, 8))
    return _write(tmp_path / "model.safetensors", t)


def shown_on_one_line(name: str, out: str) -> bool:
    """`name` is on one line of `out`, whole or elided in its middle (head…tail), never wrapped."""
    for line in out.splitlines():
        if name in line:
            return True
        for m in re.finditer(ELLIPSIS, line):
            left, right = line[:m.start()], line[m.end():]
            n = min(len(name), 80)
            head = any(name.startswith(left[-k:]) for k in range(min(len(left), n), 3, -1))
            tail = any(name.endswith(right[:k]) for k in range(min(len(right), n), 3, -1))
            if head and tail:
                return True
    return False


def assert_reads_at_80(out: str, names: list[str]) -> None:
    assert max(len(line) for line in out.splitlines()) <= 80, out
    for n in names:
        assert shown_on_one_line(n, out), (n, out)


# --- names --------------------------------------------------------------------------------------------

def test_elide_keeps_the_start_and_the_end() -> None:
    name = "bert.encoder.layer.1.attention.output.dense.weight"
    assert elide(name, 60) == name and elide(name, len(name)) == name
    assert elide(name, 40) == "bert.encoder.layer.1…output.dense.weight"
    for width in range(3, len(name)):
        short = elide(name, width)
        head, _, tail = short.partition(ELLIPSIS)
        assert len(short) <= width and name.startswith(head) and name.endswith(tail) and head and tail
    # sibling rows stay apart: the leaf module survives
    assert elide("model.layers.0.mlp.down_proj.weight", 30) != elide("model.layers.0.mlp.up_proj.weight", 30)
    assert elide("model.layers.0.mlp.down_proj.weight", 30).endswith("down_proj.weight")


@pytest.mark.parametrize("command", [["tensors"], ["summary"], ["stats", "--tensors", "--layers"], ["ties"]])
def test_names_never_wrap_at_80_columns(cli, long_names, monkeypatch, command) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = cli(*command, long_names)
    assert rc == 0, err
    # summary of an unknown architecture: the module tree (numbered blocks collapsed), not the names
    tree = ["adapters.task_specific_adapter_for_sentiment_classification", "down_projection", "up_projection"]
    names = {"tensors": LONG + UNPLACED, "summary": tree, "stats": LONG + UNPLACED, "ties": []}[command[0]]
    assert_reads_at_80(out, names)
    assert ELLIPSIS in out or not names


def test_names_whole_when_piped(long_names) -> None:
    """Through typer's CliRunner: stdout is not a TTY and no $COLUMNS: a file has no width, so no name is cut;
    with $COLUMNS=80 declared, the 80-column layout (names elided in their middle, never wrapped)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for command in (["tensors"], ["stats", "--tensors"]):
        r = CliRunner().invoke(app, [*command, long_names], env={**env, "COLUMNS": None})
        assert r.exit_code == 0, r.output
        assert ELLIPSIS not in r.output and all(any(n in line for line in r.output.splitlines()) for n in LONG + UNPLACED)
        r = CliRunner().invoke(app, [*command, long_names], env={"COLUMNS": "80"})
        assert r.exit_code == 0, r.output
        assert_reads_at_80(r.output, LONG + UNPLACED)


def _piped(*args: str, columns: str | None = None) -> str:
    """ckptstat as a process with stdout to a pipe, as `ckptstat ... > file` or `| less` runs it."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    r = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def _names(command: str, args: list[str]) -> list[str]:
    """The names the command shows, from its own --json report."""
    r = json.loads(_piped(command, *args, "--json"))
    if command == "diff":
        return [t["name"] for t in r["tensors"] if t["status"] != "equal"]
    if command == "tensors":
        return [t["name"] for t in r["tensors"]]
    if command == "flops":   # a module inside a stack is shown relative to it: `  self_attn.q_proj`
        return [m["module"].split("].", 1)[-1] for m in r["runs"][0]["modules"]]
    return [n for t in r["ties"] for n in (t["alias"], t["target"])]


@pytest.mark.parametrize("command, args", [
    ("diff", [BERT, fixture("bert-tiny-mlm")]),
    ("tensors", [fixture("bert-tiny-pretraining")]),
    ("flops", [LLAMA]),
    ("ties", [fixture("bert-tiny-mlm")]),
], ids=["diff", "tensors", "flops", "ties"])
def test_piped_output_keeps_every_name_whole(command, args) -> None:
    """Issue 32: `ckptstat diff A B > file` read `encode…weight` for all 12 changed encoder weights. Piped,
    every name the --json report holds is on one line of the text, whole; at a declared 80 columns the
    same command does elide (so the names are long enough for the test to mean something), except ties,
    whose lines move their suffix instead."""
    names = _names(command, args)
    assert names
    out = _piped(command, *args)
    lines = out.splitlines()
    assert ELLIPSIS not in out
    for n in names:
        assert any(n in line for line in lines), (n, out)
    if command != "ties":
        assert ELLIPSIS in _piped(command, *args, columns="80")


def test_piped_lines_are_not_cropped(tmp_path) -> None:
    """Piped, a `prefix NAME suffix` line (the summary's checkpoint path, a ties difference and its reason)
    is written whole: it was cut at rich's 80 columns with no ellipsis, `.../another_long_segm`."""
    folder = tmp_path / ("a_directory_name_long_enough_to_pass_eighty_columns_" * 2) / "gpt2"
    shutil.copytree(fixture("gpt2-tiny"), folder)
    weights = str(folder / "model.safetensors")
    assert weights in _piped("summary", str(folder)).splitlines()[0]
    ties = json.loads(_piped("ties", str(folder), "--json"))
    assert ties["counting"]["rows"][2]["differences"]
    for row in ties["counting"]["rows"][1:]:
        for d in row["differences"]:
            assert f"{d['name']}: {d['why']}" in _piped("ties", str(folder))


def test_wide_terminal_shows_names_whole(cli, long_names, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, _ = cli("tensors", long_names)
    assert rc == 0 and ELLIPSIS not in out and all(n in out for n in LONG + UNPLACED)


def test_diff_flops_memory_read_at_80_columns(cli, long_names, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = cli("diff", BERT, fixture("bert-tiny-mlm"))
    assert rc == 1
    assert_reads_at_80(out, ["cls.predictions.transform.LayerNorm", "bert.embeddings.word_embeddings.weight"])
    for command in ("flops", "memory"):
        rc, out, _ = cli(command, LLAMA)
        assert rc == 0
        assert max(len(line) for line in out.splitlines()) <= 80, out
    rc, out, _ = cli("flops", LLAMA, "--json")
    modules = [m["module"] for m in json.loads(out)["runs"][0]["modules"]]
    rc, out, _ = cli("flops", LLAMA)
    for m in modules:   # a module inside a stack is shown relative to it: `  self_attn.q_proj`
        assert shown_on_one_line(m.split("].", 1)[-1], out), m
    monkeypatch.setenv("COLUMNS", "60")   # narrower: names give way, numbers stay whole
    rc, out, _ = cli("tensors", long_names)
    assert rc == 0 and all(shown_on_one_line(n, out) for n in LONG + UNPLACED)
    assert max(len(line) for line in out.splitlines()) <= 60 and "32 B" in out


# --- empty answers ------------------------------------------------------------------------------------

def test_tensors_filter_matching_nothing(cli) -> None:
    rc, out, err = cli("tensors", BERT, "-f", "*lora*")
    assert rc == 1 and out == "" and err == "ckptstat: no tensor matches '*lora*'\n"
    rc, out, err = cli("tensors", BERT, "-f", "*lora*", "--json")
    assert rc == 1 and json.loads(out)["tensors"] == [] and "no tensor matches" in err
    rc, out, _ = cli("tensors", BERT, "-f", "pooler")
    assert rc == 0 and "pooler.dense.weight" in out


def test_stats_selecting_nothing(cli) -> None:
    rc, out, err = cli("stats", BERT, "-f", "*lora*")
    assert rc == 1 and "no tensor matches '*lora*'" in err
    rc, out, err = cli("stats", fixture("bert-tiny-buffers"), "-f", "position_ids", "--json")
    assert rc == 1 and json.loads(out)["tensors"] == [] and "--all-roles" in err


def test_diff_exit_status_as_diff1(cli, tmp_path) -> None:
    rc, out, err = cli("diff", BERT, BERT)
    assert rc == 0 and "no differences" in out and err == ""
    rc, out, _ = cli("diff", BERT, BERT, "--json")
    assert rc == 0 and json.loads(out)["same"] is True and json.loads(out)["rows"] == []
    rc, out, _ = cli("diff", BERT, fixture("bert-tiny-mlm"))
    assert rc == 1 and "Where they differ" in out
    rc, out, err = cli("diff", BERT, str(tmp_path / "missing.safetensors"))
    assert rc == 2 and out == "" and "missing.safetensors" in err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 5) + b"{oops")
    rc, _, err = cli("diff", str(bad), BERT)
    assert rc == 2 and err.startswith("ckptstat: error: ")
    rc, _, _ = cli("diff", BERT)   # usage
    assert rc == 2


def test_plot_without_finite_values_writes_nothing(cli, tmp_path) -> None:
    nan = _write(tmp_path / "nan.safetensors", {"encoder.layer.0.dense.weight": np.full((4, 4), np.nan),
                                                 "encoder.layer.0.dense.bias": np.full(4, np.inf)})
    out_png = tmp_path / "out.png"
    rc, out, err = cli("plot", nan, "-o", str(out_png))
    assert rc == 1 and out == "" and not out_png.exists()
    assert "no finite value" in err and "nothing to plot" in err and "not written" in err
    rc, out, err = cli("plot", BERT, "-o", str(out_png), "-f", "*lora*", "--json")
    assert rc == 1 and out == "" and not out_png.exists() and "no tensor matches '*lora*'" in err
    rc, _, err = cli("plot", BERT, "-o", str(tmp_path / "out.gif"))   # checked before reading values
    assert rc == 2 and ".png" in err


def test_plot_stats_refuses_an_empty_run(tmp_path) -> None:
    from ckptstat import CkptstatError, open_checkpoint
    from ckptstat.analysis.stats import collect
    from ckptstat.render.plots import plot_stats

    nan = _write(tmp_path / "nan.safetensors", {"w": np.full((4, 4), np.nan)})
    with pytest.raises(CkptstatError, match="nothing to plot"):
        plot_stats(collect(open_checkpoint(nan)), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# --- a mistyped command ---------------------------------------------------------------------------------

@pytest.mark.parametrize("typo, meant", [("sumary", "summary"), ("tensor", "tensors"), ("flop", "flops"),
                                         ("memroy", "memory"), ("stat", "stats")])
def test_mistyped_command_suggests_the_nearest(cli, typo, meant) -> None:
    rc, out, err = cli(typo, BERT)
    assert rc == 2 and out == "" and f"did you mean '{meant}'?" in err and err.count("\n") == 1


def test_a_path_that_looks_like_a_command_is_still_a_path(cli, tmp_path, monkeypatch) -> None:
    shutil.copy(os.path.join(BERT, "model.safetensors"), tmp_path / "sumary")
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli("sumary")
    assert rc == 0 and "did you mean" not in err and "parameters" in out
    rc, _, err = cli("nosuchmodel.safetensors")   # not a word: the missing file is reported
    assert rc == 1 and "no such file" in err and "did you mean" not in err


@pytest.mark.parametrize("options", [[], ["--json"], ["--layers"]])
def test_a_path_after_double_dash_that_starts_with_a_dash(cli, tmp_path, monkeypatch, options) -> None:
    """`ckptstat -- -model.safetensors`: after `--` every word is a path, as POSIX utilities read it; the same report
    as the file's under another spelling (./-model.safetensors). The summary shorthand saw no word but options,
    inserted no `summary`, and click answered "No such option: -m" (exit 2)."""
    shutil.copy(os.path.join(BERT, "model.safetensors"), tmp_path / "-model.safetensors")
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(*options, "--", "-model.safetensors")
    assert rc == 0, err
    assert out == cli(*options, "./-model.safetensors")[1].replace("./-model", "-model")
    rc, out, err = cli("tensors", "--json", "--", "-model.safetensors")
    assert rc == 0 and out == cli("tensors", "--json", "./-model.safetensors")[1].replace("./-model", "-model"), err


# --- one default sequence length ---------------------------------------------------------------------

@pytest.mark.parametrize("path", [BERT, LLAMA])
def test_summary_flops_memory_share_the_default_seq(cli, path) -> None:
    from ckptstat.census.model import load
    from ckptstat.families.framework.spec import default_seq

    seq = default_seq(load(path, None).spec)
    s = json.loads(cli(path, "--json")[1])["analytic"]["seq"]
    f = json.loads(cli("flops", path, "--json")[1])["runs"][0]["seq"]
    m = json.loads(cli("memory", path, "--json")[1])["seq"]
    assert s == f == m == seq
    for args in ([path], ["flops", path], ["memory", path]):
        rc, out, _ = cli(*args)
        assert rc == 0 and f"seq          {seq} (default: 128, or the model's learned positions if fewer)" in out, args


def test_a_given_seq_is_printed_as_given(cli) -> None:
    rc, out, _ = cli("flops", BERT, "-s", "16,32")
    assert rc == 0 and "seq          16, 32 (--seq)" in out and "default" not in out.split("seq ", 1)[1].splitlines()[0]
    rc, out, _ = cli("memory", BERT, "-s", "16")
    assert rc == 0 and "seq          16 (--seq)" in out
    rc, out, _ = cli(BERT, "-s", "16")   # the summary's line said '(default: ...)' for a given --seq
    assert rc == 0 and "seq          16 (--seq)" in out


# --- progress -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["stats", "plot"])
def test_cli_draws_the_library_progress_callback(cli, monkeypatch, tmp_path, command) -> None:
    from ckptstat.analysis import stats as stats_mod

    seen: list = []
    real = stats_mod.collect

    def spy(*args, **kw):
        progress = args[6] if len(args) > 6 else kw.get("progress")
        seen.append(progress)
        return real(*args, **kw)

    monkeypatch.setattr(stats_mod, "collect", spy)
    extra = ["-o", str(tmp_path / "p.png")] if command == "plot" else []
    rc, out, _ = cli(command, BERT, *extra, "--progress", "--json")
    assert rc == 0 and json.loads(out)
    assert callable(seen[-1])
    rc, _, err = cli(command, BERT, *extra, "--no-progress", "--json")
    assert rc == 0 and seen[-1] is None and err == ""


def test_progress_bar_takes_done_and_total() -> None:
    from ckptstat.render.progress import progress_bar

    with progress_bar(False) as cb:
        assert cb is None
    with progress_bar(True) as cb:
        assert cb is not None
        cb(0, 100)
        cb(100, 100)


@pytest.mark.parametrize("argv", [["summary"], ["summary", "--json"], ["stats"], ["stats", "--json"], ["stats", "--csv"],
                                  ["ties"], ["flops"], ["flops", "--json"], ["memory"], ["report"], ["diff", "PATH"],
                                  ["diff", "PATH", "--json"]])
def test_a_reader_that_leaves_early_is_no_error(argv) -> None:
    # `ckptstat PATH | head`: the pipe's reader is gone before ckptstat writes; nothing on stderr, exit 0
    import subprocess
    import sys
    st = fixture("bert-tiny", "model.safetensors")
    cmd = [sys.executable, "-m", "ckptstat", argv[0], st, *(st if a == "PATH" else a for a in argv[1:])]
    read, write = os.pipe()
    os.close(read)   # no reader at all: every write gets EPIPE
    try:
        r = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (0, "")


@pytest.mark.parametrize("command", [[], ["flops"], ["ties"]], ids=["summary", "flops", "ties"])
def test_piped_lines_keep_a_long_path_whole(tmp_path, command) -> None:
    """`ckptstat DIR > out.txt` of a folder whose path is past 80 columns: the `checkpoint` and `config` lines printed
    the path's first 67 characters and no more (each line cropped itself to rich's default 80 columns, no ellipsis,
    the `[format, N file(s)]` after it gone). Piped, each such line holds the whole path the --json report names."""
    folder = tmp_path / ("a_folder_name_long_enough_to_pass_the_line_" * 2) / "bert"
    shutil.copytree(fixture("bert-tiny-buffers"), folder)
    report = json.loads(_piped(str(folder), "--json"))
    paths = [report["path"], str(folder / "config.json")]
    assert min(map(len, paths)) > 80
    lines = _piped(*command, str(folder)).splitlines()
    assert ELLIPSIS not in "\n".join(lines)
    for path in paths if command != ["flops"] else paths[1:]:   # (flops names its config: `source PATH`)
        assert any(line.split()[1:2] == [path] for line in lines), (path, lines)
    if not command:
        assert lines[0].endswith(f"[{report['format']}, {len(report['files'])} file(s)]"), lines[0]
