"""Names that act instead of reading as themselves (issue 31; docs/security.md, "Names"): a lone surrogate,
which Python's json and pickle's 'surrogatepass' accept and no UTF-8 writer can print (`internal error:
UnicodeEncodeError` before), and the bidi overrides and line/paragraph separators, which reached terminals,
markdown and HTML raw. Run as users run ckptstat: a real subprocess with a real UTF-8 stdout."""
from __future__ import annotations

import csv
import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors
import torch
from safetensors.numpy import save_file

BIDI = "w.\u202egnp.exe\u2066x\u2069.\u2028y\u2029z\u200f\u061c"
ACTIVE = "\u202e\u2066\u2069\u2028\u2029\u200f\u061c"


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, timeout=120,
                       env={**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "200"})
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")   # strict: never a lone surrogate


def _raw_safetensors(path: str, header_json: str) -> str:
    """A safetensors file whose header is this JSON text, written byte by byte (no writer emits a lone
    surrogate escape), with one f32 tensor `w` of 2 values."""
    raw = header_json.encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + np.ones(2, np.float32).tobytes())
    return path


SURROGATE_CASES = {
    "name": '{"w\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "metadata": '{"__metadata__": {"k": "v\\udc00"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
}


@pytest.mark.parametrize("where", sorted(SURROGATE_CASES))
def test_a_lone_surrogate_in_a_safetensors_header_is_refused_like_the_reference(tmp_path, where):
    path = _raw_safetensors(str(tmp_path / "s.safetensors"), SURROGATE_CASES[where])
    with pytest.raises(Exception) as e:   # the oracle: the Rust reader refuses the header
        safetensors.safe_open(path, "np")
    assert "invalid JSON in header" in str(e.value)
    for args in (["summary"], ["tensors"], ["stats", "--csv"], ["summary", "--json"], ["stats", "--json"],
                 ["report", "-o", str(tmp_path / "r.md")]):
        rc, out, err = run(*args, path)
        assert rc == 1 and err.count("\n") == 1 and "internal error" not in err, (args, err)
        assert "lone surrogate" in err and path in err and out == "", (args, err)
    assert not os.path.exists(tmp_path / "r.md")


def test_a_lone_surrogate_in_a_pickled_name_is_refused(tmp_path):
    path = str(tmp_path / "m.pt")
    torch.save({"w\ud800": torch.ones(2)}, path)
    assert list(torch.load(path, weights_only=True)) == ["w\ud800"]   # torch itself takes it (surrogatepass)
    for args in (["summary"], ["tensors", "--json"]):
        rc, out, err = run(*args, path)
        assert rc == 1 and err.count("\n") == 1 and "lone surrogate" in err and "internal error" not in err, err


def test_json_output_never_holds_a_lone_surrogate(tmp_path):
    # a config value (not a name) holding one: the JSON says U+FFFD, which strict parsers take
    save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 2, "architectures": ["X\\ud800"]}')
    rc, out, err = run("summary", "--json", str(tmp_path))
    assert rc == 0, err
    assert "\\ud800" not in out.lower()
    json.loads(out)
    rc, out, err = run("summary", str(tmp_path))   # and the terminal shows it escaped
    assert rc == 0 and "internal error" not in err, err


def test_bidi_and_separators_are_inert_everywhere(tmp_path):
    a = str(tmp_path / "a.safetensors")
    save_file({BIDI: np.ones(4, np.float32), "model.layers.0.mlp.w": np.ones((4, 4), np.float32)}, a,
              metadata={"note": BIDI})
    b = str(tmp_path / "b.safetensors")
    save_file({BIDI: np.zeros(4, np.float32), "model.layers.0.mlp.w": np.ones((4, 4), np.float32)}, b)

    def inert(text: str, shown: bool = True) -> bool:
        return not any(c in text for c in ACTIVE) and (not shown or "\\u202e" in text and "\\u2028" in text)

    for args in (["summary", a], ["tensors", a], ["stats", a], ["stats", "--csv", a], ["diff", a, b],
                 ["diff", a, b, "--format", "md"], ["diff", a, b, "--format", "html"]):
        rc, out, err = run(*args)
        lists_names = args[0] in ("tensors", "diff") or "--csv" in args
        assert rc in (0, 1) and "internal error" not in err and inert(out, lists_names), (args, out[-400:])
    rows = list(csv.DictReader(io.StringIO(run("stats", "--csv", a)[1])))
    assert any(r["name"].startswith("w.\\u202egnp.exe") for r in rows)
    for fmt in ("md", "html"):
        target = tmp_path / f"report.{fmt}"
        rc, out, err = run("report", a, "-o", str(target))
        assert rc == 0 and inert(target.read_text("utf-8")), fmt
    rc, out, err = run("tensors", "--json", a)   # JSON keeps the exact name: it is escaped there
    assert rc == 0 and BIDI in [t["name"] for t in json.loads(out)["tensors"]]
