"""Links in model folders (issue 31, fifth red-team pass; docs/security.md): a Hugging Face cache snapshot's
files are relative links into its repository's `blobs/`, which `scan DIR` and `audit` follow (and used to skip,
exiting 0); a `blobs` that is itself a link elsewhere (to `/`) lets nothing out; anything a folder scan skips
makes its exit code 1. The checkpoints are real torch.save files whose payload the real torch.load runs."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hf_cache import hf_repo, hostile_blobs
from polyglots import Mkdir, payload, torch_bytes, torch_load_runs
from safetensors.numpy import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.scan import exit_code, scan_path
from ckptstat.cli import main
from ckptstat.core.files import followed, hf_cache_blobs
from ckptstat.errors import ExternalReferenceError

torch = pytest.importorskip("torch")


def _st_bytes(tmp_path) -> bytes:
    p = tmp_path / "st.tmp"
    save_file({"w": np.ones((2, 2), np.float32)}, str(p))
    data = p.read_bytes()
    p.unlink()
    return data


@pytest.fixture
def cache(tmp_path):
    """A cache holding one repository with a pickled checkpoint that runs a payload, a safetensors file and a
    config; and one benign repository."""
    marker = str(tmp_path / "RAN")
    hub = tmp_path / "hub"
    evil = hf_repo(hub, {"pytorch_model.bin": torch_bytes({"w": torch.ones(2), "x": Mkdir(marker)}),
                         "model.safetensors": _st_bytes(tmp_path), "config.json": b'{"model_type": "bert"}'})
    benign = hf_repo(hub, {"pytorch_model.bin": torch_bytes({"w": torch.ones(2)}),
                           "config.json": b"{}"}, name="models--org--benign")
    return hub, evil, benign, marker


def test_torch_load_runs_the_snapshot_file(cache):
    _, evil, _, marker = cache
    assert torch_load_runs(str(evil / "pytorch_model.bin"), marker)


def test_scan_of_a_snapshot_follows_its_blobs(cache, capsys):
    """Was: `0 file(s) scanned ... 1 skipped`, exit 0. The link stays inside the repository: followed."""
    _, evil, benign, _ = cache
    r = scan_path(str(evil))
    assert {f["path"]: f["status"] for f in r["files"]} == {"pytorch_model.bin": "unsafe"}
    assert r["skipped"] == [] and exit_code(r) == 1
    assert main(["scan", str(evil)]) == 1
    r = scan_path(str(benign))
    assert {f["path"]: f["status"] for f in r["files"]} == {"pytorch_model.bin": "safe"} and exit_code(r) == 0
    capsys.readouterr()


def test_scan_of_the_whole_cache_names_snapshot_files(cache):
    """A blob is scanned once, under the name torch.load is given (the snapshot's), not `blobs/<sha>`."""
    hub, _, _, _ = cache
    r = scan_path(str(hub))
    got = {f["path"]: f["status"] for f in r["files"]}
    snap = os.path.join("snapshots", os.path.basename(os.path.dirname(os.path.dirname(hub))))
    assert got == {os.path.join("models--org--benign", "snapshots", *_rev(hub), "pytorch_model.bin"): "safe",
                   os.path.join("models--org--name", "snapshots", *_rev(hub), "pytorch_model.bin"): "unsafe"}, (got, snap)
    assert r["skipped"] == [] and exit_code(r) == 1


def _rev(hub) -> list[str]:
    return os.listdir(hub / "models--org--name" / "snapshots")


def test_audit_of_a_snapshot_reads_and_scans_its_files(cache, tmp_path, capsys):
    _, evil, _, _ = cache
    out = tmp_path / "audit.jsonl"
    assert main(["audit", str(evil), "--out", str(out), "--json"]) == 1
    capsys.readouterr()
    recs = {os.path.basename(r["path"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {"pytorch_model.bin", "model.safetensors"}
    assert recs["pytorch_model.bin"]["scan"]["verdict"] == "unsafe"
    assert recs["model.safetensors"]["error"] is None


def test_a_snapshot_reads_its_blobs(cache):
    _, evil, _, _ = cache
    assert open_checkpoint(evil).config == {"model_type": "bert"}
    assert hf_cache_blobs(str(evil)) == os.path.realpath(evil / ".." / ".." / "blobs")


def test_blobs_linked_to_root_lets_nothing_out(tmp_path, capsys):
    """Was: a `blobs -> /` made every file "inside": `tensors` listed an outside file's tensors and a
    `config.json -> /etc/passwd` was opened and parsed. Now such a `blobs` is no part of the snapshot."""
    outside = tmp_path / "outside"
    outside.mkdir()
    save_file({"secret": np.ones(3, np.float32)}, str(outside / "secret.safetensors"))
    (outside / "config.json").write_text('{"model_type": "bert"}')
    snap = hostile_blobs(tmp_path / "hub", {"model.safetensors": str(outside / "secret.safetensors"),
                                            "config.json": "/etc/passwd"})
    assert hf_cache_blobs(str(snap)) is None
    assert not followed(str(snap / "model.safetensors"), os.path.realpath(snap))
    with pytest.raises(ExternalReferenceError, match="weights file"):
        open_checkpoint(snap)
    rc = main(["tensors", str(snap)])
    out, err = capsys.readouterr()
    assert rc == 1 and "secret" not in out and "--allow-external" in err and err.count("\n") == 1
    # a snapshot whose weights are its own file, and whose config links out through `blobs`
    os.unlink(snap / "model.safetensors")
    save_file({"w": np.ones(3, np.float32)}, str(snap / "model.safetensors"))
    with pytest.raises(ExternalReferenceError, match="config"):
        open_checkpoint(snap)
    os.unlink(snap / "config.json")
    os.symlink("../../blobs" + str(outside / "config.json"), snap / "config.json")
    with pytest.raises(ExternalReferenceError, match="config"):
        open_checkpoint(snap)
    assert open_checkpoint(snap, allow_external=True).config == {"model_type": "bert"}   # the flag still follows it


def test_folder_scan_exits_1_when_anything_was_skipped(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "out.pt").write_bytes(torch_bytes({"w": torch.ones(2)}))
    os.symlink(tmp_path / "out.pt", tmp_path / "m" / "model.pt")      # a link out: not followed
    r = scan_path(str(tmp_path / "m"))
    assert r["totals"]["files"] == 0 and r["totals"]["skipped"] == 1 and exit_code(r) == 1
    assert main(["scan", str(tmp_path / "m")]) == 1
    os.unlink(tmp_path / "m" / "model.pt")
    os.mkfifo(tmp_path / "m" / "fifo")                                 # not a regular file: skipped unopened
    assert main(["scan", str(tmp_path / "m")]) == 1
    os.unlink(tmp_path / "m" / "fifo")
    assert main(["scan", str(tmp_path / "m")]) == 0
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------- audit --out
def _audit(root, out, *more) -> int:
    return main(["audit", str(root), "--out", str(out), "--json", *more])


def _zoo(tmp_path):
    """A folder holding one small checkpoint, to audit."""
    root = tmp_path / "m"
    root.mkdir()
    save_file({"w": np.ones(3, np.float32)}, str(root / "model.safetensors"))
    return root


def test_audit_out_never_written_through_a_planted_symlink(tmp_path, capsys):
    """Was: `--out` opened with append through a planted link (a shell rc file grew by a JSON record)."""
    root = _zoo(tmp_path)
    rc_file = tmp_path / "bashrc"
    rc_file.write_text("alias ls='ls -F'\n")
    out = tmp_path / "audit.jsonl"
    os.symlink(rc_file, out)
    assert _audit(root, out) == 0
    capsys.readouterr()
    assert rc_file.read_text() == "alias ls='ls -F'\n"
    assert not os.path.islink(out) and len(out.read_text().splitlines()) == 1
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_audit_out_hard_linked_to_an_input_is_refused(tmp_path, capsys):
    """Was: paths compared, so a hard link to an input was opened for append (the checkpoint was corrupted)."""
    root = _zoo(tmp_path)
    before = (root / "model.safetensors").read_bytes()
    out = tmp_path / "audit.jsonl"
    os.link(root / "model.safetensors", out)
    assert _audit(root, out) == 2
    assert "is an input" in capsys.readouterr().err
    assert (root / "model.safetensors").read_bytes() == before
    os.unlink(out)
    os.symlink(root / "model.safetensors", out)     # a symlink to an input: refused too, by inode
    assert _audit(root, out) == 2
    capsys.readouterr()
    assert (root / "model.safetensors").read_bytes() == before


def test_audit_out_hard_link_to_another_file_keeps_that_file(tmp_path, capsys):
    """An --out that is a hard link to a file that is no input: the results replace the name, never that inode."""
    root = _zoo(tmp_path)
    other = tmp_path / "notes.txt"
    other.write_text("mine\n")
    out = tmp_path / "audit.jsonl"
    os.link(other, out)
    assert _audit(root, out) == 0
    capsys.readouterr()
    assert other.read_text() == "mine\n" and os.stat(out).st_ino != os.stat(other).st_ino


def test_audit_still_resumes_and_appends(tmp_path, capsys):
    root = tmp_path / "m"
    root.mkdir()
    save_file({"w": np.ones(3, np.float32)}, str(root / "a.safetensors"))
    out = tmp_path / "audit.jsonl"
    assert _audit(root, out) == 0
    first = out.read_text()
    save_file({"w": np.ones(4, np.float32)}, str(root / "b.safetensors"))
    assert _audit(root, out) == 0
    capsys.readouterr()
    text = out.read_text()
    assert text.startswith(first) and len(text.splitlines()) == 2      # the old record kept, the new one appended
    assert _audit(root, out, "--fresh") == 0
    assert len(out.read_text().splitlines()) == 2
    capsys.readouterr()


def test_audit_of_the_whole_cache_names_snapshot_files_beside_their_config(tmp_path, capsys):
    """Was: `blobs/` walked before `snapshots/`, so a blob was audited as `blobs/<sha>`, its snapshot link
    skipped as seen, and the cross-check said "no config.json". Now under the snapshot's name, with its config;
    a blob no snapshot links to is still audited, under its own name."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path / "saved")
    files = {n: (tmp_path / "saved" / n).read_bytes() for n in ("model.safetensors", "config.json")}
    hub = tmp_path / "hub"
    snap = hf_repo(hub, files)
    orphan = hub / "models--org--name" / "blobs" / ("0" * 64)
    orphan.write_bytes(_st_bytes(tmp_path))
    out = tmp_path / "audit.jsonl"
    assert main(["audit", str(hub), "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    recs = {r["path"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {str(snap / "model.safetensors"), str(orphan)}
    rec = recs[str(snap / "model.safetensors")]
    assert rec["parameters"] == sum(p.numel() for p in model.parameters())
    assert rec["config"]["verdict"] == "match" and rec["config"]["model"] == "LlamaForCausalLM"


def test_a_pickle_named_safetensors_is_judged_under_its_other_name(tmp_path):
    """torch.load hands a path ending in `.safetensors` to safetensors, and reads any other name's bytes: a pickle
    stored as `a.safetensors` with a link `model_best.pth.tar` to it was judged under the first name alone, "no
    pickle", so a folder scan listed nothing and exited 0 (sixth red-team pass). Oracle: torch.load of the link runs it."""
    marker = str(tmp_path / "RAN")
    d = tmp_path / "run"
    d.mkdir()
    (d / "a.safetensors").write_bytes(b"\x80\x02" + payload(marker))
    os.symlink("a.safetensors", d / "model_best.pth.tar")
    assert torch_load_runs(str(d / "model_best.pth.tar"), marker)
    r = scan_path(str(d))
    assert [(f["path"], f["status"]) for f in r["files"]] == [("model_best.pth.tar", "unsafe")], r
    assert exit_code(r) == 1 and not os.path.exists(marker)
