"""A torch.distributed.checkpoint folder's files linked out of it (red-team pass `scan2`, docs/security.md
"Containment"). The DCP reader opened a rank's `.distcp`, a HuggingFaceStorageWriter shard, Megatron's
`metadata.json` and `common.pt` before the folder hook's check, so without --allow-external the outside file was read:
its size in the error line (`past the end of the 100-byte file`), its bytes parsed, a `metadata.json` read with no
refusal at all. Each is now refused, in one line, before it is opened; with --allow-external it is read."""
from __future__ import annotations

import json
import os
import warnings

import pytest

from ckptstat.cli import main

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")


@pytest.fixture()
def folder(tmp_path):
    """A one-process dcp.save of one tensor, and a folder `outside` beside it."""
    ck = tmp_path / "ck"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (no process group: torch assumes one process)
        dcp.save({"w": torch.arange(12.0).reshape(3, 4)}, checkpoint_id=str(ck))
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_bytes(b"x" * 100)
    return ck


def _refused(capsys, ck, name):
    assert main(["summary", str(ck)]) == 1
    err = capsys.readouterr().err
    assert "outside the checkpoint; not followed" in err and name in err and "100-byte" not in err, err


def test_a_rank_file_linked_out_is_refused_before_it_is_read(folder, capsys):
    assert main(["summary", str(folder)]) == 0   # the genuine folder reads
    capsys.readouterr()
    rank = next(n for n in os.listdir(folder) if n.endswith(".distcp"))
    os.replace(folder / rank, folder.parent / "outside" / rank)
    os.symlink(folder.parent / "outside" / "secret.txt", folder / rank)
    _refused(capsys, folder, rank)
    os.remove(folder / rank)
    os.symlink(folder.parent / "outside" / rank, folder / rank)
    _refused(capsys, folder, rank)
    assert main(["summary", "--allow-external", str(folder)]) == 0


def test_megatron_metadata_json_linked_out_is_refused(folder, capsys):
    (folder.parent / "outside" / "metadata.json").write_text(json.dumps({"not": "megatron"}))
    os.symlink(folder.parent / "outside" / "metadata.json", folder / "metadata.json")
    _refused(capsys, folder, "metadata.json")


def test_a_huggingface_storage_shard_linked_out_is_refused(tmp_path, capsys):
    from safetensors.torch import save_file

    (tmp_path / "ck").mkdir()
    (tmp_path / "outside").mkdir()
    save_file({"w": torch.zeros(4)}, str(tmp_path / "outside" / "other.safetensors"))
    (tmp_path / "outside" / "secret.txt").write_bytes(b"x" * 100)
    os.symlink(tmp_path / "outside" / "other.safetensors",
               tmp_path / "ck" / "shard-00001-model-00001-of-00001.safetensors")
    _refused(capsys, tmp_path / "ck", "shard-00001-model-00001-of-00001.safetensors")


def test_scan_does_not_trace_an_item_file_linked_out(tmp_path):
    """`scan .metadata` traced the non-tensor items of a rank file linked out of the folder (a folder's scan skips that
    link): now unknown, the link named, nothing of it read."""
    from ckptstat.analysis.scan import exit_code, scan_path

    ck = tmp_path / "ck"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.zeros(2), "step": {"epoch": 3}}, checkpoint_id=str(ck))
    (tmp_path / "outside").mkdir()
    rank = next(n for n in os.listdir(ck) if n.endswith(".distcp"))
    assert any(rank in p["record"] for p in scan_path(str(ck / ".metadata"))["pickles"])   # read while inside
    os.replace(ck / rank, tmp_path / "outside" / rank)
    os.symlink(tmp_path / "outside" / rank, ck / rank)
    r = scan_path(str(ck / ".metadata"))
    assert r["status"] == "unknown" and exit_code(r) == 1, r["verdict"]
    assert not any(rank in p["record"] for p in r["pickles"]), r["pickles"]
    assert any("link to outside the folder" in u for u in r["unknown"]), r["unknown"]
