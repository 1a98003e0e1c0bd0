"""The command line, in-process: output, --json schemas, exit codes, escaping."""
import json
import struct

from conftest import fixture


def test_summary_human(cli, expected_st):
    rc, out, err = cli(fixture("bert-tiny"))
    assert rc == 0 and err == ""
    assert f"{expected_st['bert-tiny']['parameters']:,}" in out and "embedding" in out and "pooler" in out and "bert" in out
    # reads at 80 columns (CliRunner width); a line naming the checkout's path is as long as that path
    assert max(len(line) for line in out.splitlines() if fixture("bert-tiny") not in line) <= 80


def test_summary_equals_summary_subcommand(cli):
    want = cli("summary", fixture("bert-tiny"), "--json")[1]
    assert cli(fixture("bert-tiny"), "--json")[1] == want
    assert cli("--json", fixture("bert-tiny"))[1] == want  # options may come first
    assert cli("--config", fixture("bert-tiny", "config.json"), "--json", fixture("bert-tiny"))[1] == want


def test_summary_json_schema(cli):
    rc, out, _ = cli(fixture("bert-tiny-buffers"), "--json")
    r = json.loads(out)
    assert rc == 0 and r["schema"] == "ckptstat.summary/1"
    for key in ("path", "format", "files", "config", "architecture", "counting", "parameters", "buckets", "layers",
                "dtypes", "non_parameters", "unplaced", "storage", "metadata", "notes"):
        assert key in r, key
    assert r["parameters"]["unique"] == sum(b["params"] for b in r["buckets"]) == sum(d["params"] for d in r["dtypes"])


def test_layers_option(cli):
    rc, out, _ = cli(fixture("bert-tiny"), "--layers")
    assert rc == 0 and "encoder.0" in out and "encoder.1" in out


def test_tensors_filter(cli):
    rc, out, _ = cli("tensors", fixture("bert-tiny"), "--filter", "*pooler*", "--json")
    rows = json.loads(out)["tensors"]
    assert rc == 0 and {r["name"] for r in rows} == {"pooler.dense.weight", "pooler.dense.bias"}
    assert all(r["bucket"] == "pooler" and r["role"] == "parameter" for r in rows)
    rc, out, _ = cli("tensors", fixture("bert-tiny"), "-f", "LayerNorm")
    assert rc == 0 and "LayerNorm" in out and "query" not in out


def test_exit_codes(cli, tmp_path):
    rc, out, err = cli(str(tmp_path / "nope.safetensors"))
    assert rc == 1 and out == "" and "nope.safetensors: no such file" in err
    rc, _, err = cli("tensors")  # missing argument
    assert rc == 2
    rc, _, err = cli(fixture("bert-tiny"), "--no-such-option")
    assert rc == 2
    rc, out, _ = cli("--version")
    assert rc == 0 and out.startswith("ckptstat ")


def test_debug_shows_traceback(cli, tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 5) + b"{oops")
    rc, _, err = cli(str(bad), "--debug")
    assert rc == 1 and "Traceback" in err and "not valid JSON" in err


def test_hostile_names_are_escaped(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    name = "\x1b[31mred\x1b[0m[bold]x[/bold]"
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "evil.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    rc, out, _ = cli("tensors", str(path))
    assert rc == 0 and "\x1b" not in out and "\\x1b[31mred" in out and "[bold]x[/bold]" in out
    rc, out, _ = cli(str(path))
    assert rc == 0 and "\x1b" not in out
