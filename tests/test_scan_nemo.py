"""`ckptstat scan` of NeMo archives (analysis/scan/nemo.py, nemo_config.py) against what loading them really runs.

- The config payloads: fixtures/nemo/*.nemo, written by fixtures/make_nemo.py in a scratch venv with the hydra NeMo
  pins (hydra-core 1.3.2, omegaconf 2.3.0), which loaded each as NeMo's restore_from builds a model (OmegaConf.load,
  resolve, hydra.utils.instantiate of every `_target_`, import of every `target`) and recorded whether that created the
  marker file: fixtures/expected_nemo.json. scan must call every one that ran unsafe or unknown, never safe.
- The pickle payloads: archives built here whose member NeMo (or a model, or Megatron) torch.loads carries an object
  that creates a marker; extracted as tarfile extracts them and torch.load'ed in a subprocess to see that it runs.
- Before this, `ckptstat scan model.nemo` said "torch.load raises: the tar has no 'storages' member" (exit 2) and a
  folder scan did not list the archive at all."""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zlib

import library_runner
import pytest
from conftest import FIXTURES
from hf_cache import hf_repo

from ckptstat.analysis.scan import nemo, scan_path

torch = pytest.importorskip("torch")

NEMO = os.path.join(FIXTURES, "nemo")
with open(os.path.join(FIXTURES, "expected_nemo.json")) as _f:
    ORACLE = json.load(_f)
OPEN = f"{open.__module__}.{open.__qualname__}"     # the global pickle writes for the builtin open (io.open)
SYSTEM = f"{os.system.__module__}.{os.system.__name__}"   # posix.system
# What scan says of each fixture (the oracle says which ran: every one that ran must be unsafe or unknown).
EXPECTED = {
    "benign-asr-ctc-bpe.nemo": "safe", "benign-fastpitch.nemo": "safe", "benign-quartznet-gz.nemo": "safe",
    "benign-megatron-gpt-tp2.nemo": "safe", "benign-megatron-gpt-dist.nemo": "safe", "config-torch-nn.nemo": "safe",
    "config-open.nemo": "unsafe", "config-os-system.nemo": "unsafe", "config-subprocess.nemo": "unsafe",
    "config-model-section.nemo": "unsafe", "config-cls-params.nemo": "unsafe", "config-flow.nemo": "unsafe",
    "config-quoted-key.nemo": "unsafe",
    "config-partial.nemo": "unsafe",            # does not run at once (a functools.partial): the import still happens
    "config-planted-target.nemo": "unknown", "config-planted-target-key.nemo": "unknown",   # SUSPICIOUS: not NeMo's
    "config-alias.nemo": "unknown", "config-merge.nemo": "unknown", "config-tag.nemo": "unknown",
    "config-escape.nemo": "unknown", "config-oc-decode.nemo": "unknown",
    "extract-dotdot.nemo": "unsafe", "extract-link.nemo": "unsafe",
}


def test_every_fixture_has_an_expectation_and_runs_what_the_oracle_says():
    files = ORACLE["files"]
    assert set(files) == set(EXPECTED) == set(os.listdir(NEMO))
    assert ORACLE["hydra-core"] == "1.3.2"
    for name, o in files.items():
        r = scan_path(os.path.join(NEMO, name))
        assert r["status"] == EXPECTED[name], (name, r["verdict"])
        if o["executes"]:
            assert r["status"] != "safe", (name, r["verdict"])
        assert r["torch_load"].startswith("not torch.load's: NeMo's restore_from"), name
        assert r["weights_only_loadable"] is False
    # the oracle itself: what ran, and what did not (a partial waits for a call; torch.nn.Linear is a layer)
    ran = {n for n, o in files.items() if o["executes"]}
    assert ran == {n for n in EXPECTED if n.startswith(("config-", "extract-"))} - {"config-partial.nemo",
                                                                                    "config-torch-nn.nemo"}


def test_the_verdicts_name_the_target_and_where(tmp_path):
    r = scan_path(os.path.join(NEMO, "config-model-section.nemo"))
    assert r["unsafe_globals"] == ["os.system"]
    (f,) = r["findings"]
    assert f["opcode"] == "_target_" and "model.decoder._target_" in f["why"] and f["offset"] > 0   # (its line)
    assert r["verdict"] == "UNSAFE: NeMo's restore_from would import and may call: os.system"
    r = scan_path(os.path.join(NEMO, "config-planted-target-key.nemo"))
    assert r["verdict"].startswith("SUSPICIOUS: model_config.yaml names modules outside NeMo") and \
        "ckptstat_nemo_planted.Model" in r["verdict"]
    r = scan_path(os.path.join(NEMO, "extract-link.nemo"))
    assert "through the link 'lnk'" in r["verdict"] and "before 2.2" in r["verdict"]
    r = scan_path(os.path.join(NEMO, "benign-quartznet-gz.nemo"))
    assert "gzip'd" in r["format"] and r["verdict"].startswith("safe: model_config.yaml names only NeMo's own")
    (tmp_path / "weights-only.nemo").write_bytes(_archive({"model_weights.ckpt": _saved(_state())}, config=False))
    r = scan_path(str(tmp_path / "weights-only.nemo"))
    assert r["status"] == "safe" and r["verdict"].startswith("safe: no model_config.yaml"), r["verdict"]


class _Open:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _config() -> bytes:
    with tarfile.open(os.path.join(NEMO, "benign-asr-ctc-bpe.nemo")) as tar:
        member = tar.extractfile("./model_config.yaml")
        assert member is not None
        return member.read()


def _saved(obj: object, legacy: bool = False) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def _archive(members: dict[str, bytes], gz: bool = False, config: bool = True) -> bytes:
    """A tar as NeMo writes one: `.`, then `./name` for each member (folders made as tar.add makes them)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        tar.addfile(_dir("."))
        done = set()
        for name, data in (({"model_config.yaml": _config()} if config else {}) | members).items():
            parts = name.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in done and ".." not in folder:
                    tar.addfile(_dir(f"./{folder}"))
                    done.add(folder)
            ti = tarfile.TarInfo(f"./{name}")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return gzip.compress(buf.getvalue()) if gz else buf.getvalue()


def _dir(name: str) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode = tarfile.DIRTYPE, 0o755
    return ti


def _state() -> dict:
    return {"encoder.weight": torch.rand(4, 4), "decoder.bias": torch.zeros(4)}


def _torch_load_runs(archive: str, member: str, tmp: str) -> bool:
    """Extract the archive as NeMo does (tarfile; nested archives too) and torch.load the member in a fresh process:
    whether that created the marker."""
    out = os.path.join(tmp, "extracted")
    with tarfile.open(archive) as tar:       # "r:*": plain or gzip, as NeMo's _tar_open tries both
        tar.extractall(out, filter="data")
    target = os.path.join(out, member)
    if "!" in member:                         # a member of a .nemo inside: extract that one too
        outer, inner = member.split("!")
        with tarfile.open(os.path.join(out, outer)) as tar:
            tar.extractall(os.path.join(out, "inner"), filter="data")
        target = os.path.join(out, "inner", inner)
    library_runner.python("import sys, torch; torch.load(sys.argv[1], weights_only=False)", target)
    return os.path.exists(os.path.join(tmp, "ran"))


CASES = {   # name -> (members, gz, the member torch.load reads ("outer!inner" inside a nested .nemo))
    "weights": (lambda m: {"model_weights.ckpt": _saved({"state": _state(), "x": _Open(m)})}, False, "model_weights.ckpt"),
    "weights_gz": (lambda m: {"model_weights.ckpt": _saved({"x": _Open(m)})}, True, "model_weights.ckpt"),
    "legacy_save": (lambda m: {"model_weights.ckpt": _saved({"x": _Open(m)}, legacy=True)}, False, "model_weights.ckpt"),
    "tensor_parallel_rank": (lambda m: {"mp_rank_00/model_weights.ckpt": _saved(_state()),
                                        "mp_rank_01/model_weights.ckpt": _saved({"x": _Open(m)})}, False,
                             "mp_rank_01/model_weights.ckpt"),
    "megatron_common": (lambda m: {"model_weights/common.pt": _saved({"iteration": 3, "x": _Open(m)}),
                                   "model_weights/metadata.json": b'{"sharded_backend": "torch_dist"}'}, False,
                        "model_weights/common.pt"),
    "artifact": (lambda m: {"model_weights.ckpt": _saved(_state()),
                            "0a1b2c3d_speaker_embeddings.pt": _saved([_Open(m)])}, True,
                 "0a1b2c3d_speaker_embeddings.pt"),
    "nested_nemo": (lambda m: {"model_weights.ckpt": _saved(_state()),
                               "submodel.nemo": _archive({"model_weights.ckpt": _saved({"x": _Open(m)})})}, False,
                    "submodel.nemo!model_weights.ckpt"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_pickle_torch_load_runs_is_unsafe(case, tmp_path):
    marker = str(tmp_path / "ran")
    members, gz, member = CASES[case]
    archive = tmp_path / "model.nemo"
    archive.write_bytes(_archive(members(marker), gz))
    assert _torch_load_runs(str(archive), member, str(tmp_path)), case   # the oracle: the payload runs
    r = scan_path(str(archive))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [OPEN], (case, r["verdict"])
    assert r["verdict"] == f"UNSAFE: NeMo's restore_from would import and may call: {OPEN}"
    assert all(member.split("!")[-1] in f["record"] for f in r["findings"]), r["findings"]
    benign = tmp_path / "benign.nemo"   # the same archive with the payload's state only: safe
    benign.write_bytes(_archive({k: v for k, v in members(marker).items() if k.endswith(".json")} |
                                {"model_weights.ckpt": _saved(_state())}, gz))
    assert scan_path(str(benign))["status"] == "safe"


def test_the_reported_gap_through_the_cli(tmp_path):
    """The measured gap: a .nemo whose weights are a pickle of os.system('echo pwned'), alone and in a folder."""
    class _System:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.nemo").write_bytes(_archive({"model_weights.ckpt": _saved(_System())}))
    shutil.copy(folder / "model.nemo", folder / "weights.data")    # any name: a tar holding model_config.yaml
    (folder / "dataset.tar").write_bytes(_archive({"a.txt": b"x"}, config=False))   # a tar NeMo never reads: not listed
    (folder / "broken.nemo").write_bytes(b"not a tar at all")       # a name that says NeMo: listed, read or not
    run = [sys.executable, "-m", "ckptstat", "scan"]
    p = subprocess.run([*run, str(folder / "model.nemo")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and f"UNSAFE: NeMo's restore_from would import and may call: {SYSTEM}" in p.stdout, \
        p.stdout + p.stderr
    p = subprocess.run([*run, str(folder), "--json"], capture_output=True, text=True, timeout=300)
    files = {f["path"]: f["status"] for f in json.loads(p.stdout)["files"]}
    assert p.returncode == 1 and files == {"model.nemo": "unsafe", "weights.data": "unsafe", "broken.nemo": "unreadable"}


def test_a_hugging_face_cache_is_scanned_through_its_links(tmp_path):
    with open(os.path.join(NEMO, "config-os-system.nemo"), "rb") as f:
        hostile = f.read()
    with open(os.path.join(NEMO, "benign-fastpitch.nemo"), "rb") as f:
        benign = f.read()
    snap = hf_repo(tmp_path / "hub", {"parakeet.nemo": hostile, "tts/fastpitch.nemo": benign, "README.md": b"# model\n"})
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(tmp_path / "hub"), "--json"], capture_output=True,
                       text=True, timeout=300)
    rel = os.path.relpath(snap, tmp_path / "hub")
    files = {f["path"]: f["status"] for f in json.loads(p.stdout)["files"]}
    assert p.returncode == 1
    assert files == {f"{rel}/parakeet.nemo": "unsafe", f"{rel}/tts/fastpitch.nemo": "safe"}, files


def test_over_http_the_same(tmp_path):
    """`ckptstat scan URL` (a subprocess, a loopback server): the local report, file by file and for the folder."""
    from remote_server import Server

    for name in ("config-os-system.nemo", "benign-quartznet-gz.nemo", "config-planted-target.nemo",
                 "extract-dotdot.nemo"):
        shutil.copy(os.path.join(NEMO, name), tmp_path / name)
    (tmp_path / "weights.nemo").write_bytes(_archive({"model_weights.ckpt": _saved({"x": _Open("/nonexistent")})}, True))
    with Server(str(tmp_path)) as s:
        for name in sorted(os.listdir(tmp_path)):
            p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/{name}", "--json"],
                               capture_output=True, text=True, timeout=300)
            remote, local = json.loads(p.stdout), scan_path(str(tmp_path / name))
            assert p.returncode == (0 if local["status"] == "safe" else 1), (name, p.stderr)
            assert {k: v for k, v in remote.items() if k not in ("path", "fetched")} == \
                {k: v for k, v in local.items() if k != "path"}, name
        p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/", "--json"], capture_output=True,
                           text=True, timeout=300)
        files = {f["path"]: f["status"] for f in json.loads(p.stdout)["files"]}
        assert files == {n: scan_path(str(tmp_path / n))["status"] for n in os.listdir(tmp_path)}


# ---------------------------------------------------------------------------------------------------- hostile bounds

def _timed(path: str) -> tuple[dict, float]:
    start = time.process_time()
    r = scan_path(path)
    return r, time.process_time() - start


def test_a_member_claiming_a_huge_size_is_read_within_the_file(tmp_path):
    config = tarfile.TarInfo("./model_config.yaml")
    config.size = 10
    weights = tarfile.TarInfo("./model_weights.ckpt")
    weights.size = 10 ** 11                    # 100 GB claimed (GNU's base-256 size), 1 KiB there
    p = tmp_path / "claims.nemo"
    p.write_bytes(config.tobuf(tarfile.GNU_FORMAT) + b"a: 1\nb: 2\n".ljust(512, b"\0") +
                  weights.tobuf(tarfile.GNU_FORMAT) + _saved(_state())[:1024])
    r, cpu = _timed(str(p))
    assert cpu < 5 and r["status"] == "safe" and any("cut short" in n for n in r["notes"]), r


def test_too_many_members_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(nemo, "MAX_TAR_MEMBERS", 50)
    (tmp_path / "many.nemo").write_bytes(_archive({f"f{i}.txt": b"x" for i in range(60)}))
    r = scan_path(str(tmp_path / "many.nemo"))
    assert r["status"] == "unknown" and "more than 50 members" in r["verdict"]
    # not named .nemo, no model_config.yaml among the first 50: no NeMo archive as far as scan looked, not listed
    (tmp_path / "many.tar").write_bytes(_archive({f"f{i}.txt": b"x" for i in range(60)}, config=False))
    assert {f["path"]: f["status"] for f in scan_path(str(tmp_path))["files"]} == {"many.nemo": "unknown"}


def test_a_yaml_bomb_a_deep_config_and_a_big_one_are_unknown_at_once(tmp_path, cli):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                                                        for p, c in zip("abcdefgh", "bcdefghi"))
    deep = "".join(" " * i + f"k{i}:\n" for i in range(400)) + " " * 400 + "_target_: os.system\n"
    flow = "p: " + "[" * 100_000 + "]" * 100_000 + "\n"
    for name, text in (("bomb", bomb), ("deep", deep), ("flow", flow)):
        p = tmp_path / f"{name}.nemo"
        p.write_bytes(_archive({"model_config.yaml": text.encode()}, config=False))
        r, cpu = _timed(str(p))
        assert r["status"] == "unknown" and cpu < 5, (name, r["verdict"], cpu)
    wide = "p: [\n" + "  a,\n" * 200_000 + "]\n_target_: nemo.collections.asr.modules.ConvASRDecoder\n"   # linear
    p = tmp_path / "wide.nemo"
    p.write_bytes(_archive({"model_config.yaml": wide.encode()}, config=False))
    r, cpu = _timed(str(p))
    assert r["status"] == "safe" and cpu < 10, (r["verdict"], cpu)
    rc, out, _ = cli("--limit", "config_bytes=1000", "scan", os.path.join(NEMO, "benign-asr-ctc-bpe.nemo"), "--json")
    assert rc == 1 and "config_bytes" in json.loads(out)["verdict"]


def test_a_gzip_bomb_stops_at_the_inflate_bound(tmp_path, cli):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:") as tar:
        ti = tarfile.TarInfo("./model_config.yaml")
        ti.size = len(_config())
        tar.addfile(ti, io.BytesIO(_config()))
        ti = tarfile.TarInfo("./pad.bin")
        ti.size = 64 << 20
        tar.addfile(ti, io.BytesIO(bytes(64 << 20)))
    p = tmp_path / "bomb.nemo"
    p.write_bytes(zlib.compress(raw.getvalue(), 9, wbits=31))        # 64 MiB of zeros in ~65 KB
    start = time.process_time()
    rc, out, _ = cli("--limit", "inflate_ratio=4", "--limit", "expansion_floor=1048576", "scan", str(p), "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "inflate_ratio" in r["verdict"], r["verdict"]
    assert time.process_time() - start < 5


def test_a_gzip_archive_is_read_in_one_pass_and_rewinds_within_its_bound(monkeypatch):
    """The heads and tails of the members scan traces are kept as the listing's pass goes by: one pass suffices.
    Without them every seek back is another pass, and past GZIP_PASSES the verdict is unknown."""
    gz = os.path.join(NEMO, "benign-quartznet-gz.nemo")
    monkeypatch.setattr(nemo, "GZIP_PASSES", 1)
    assert scan_path(gz)["status"] == "safe"
    monkeypatch.setattr(nemo, "_KEEP", 16)
    monkeypatch.setattr(nemo, "_RECENT", 1024)
    r = scan_path(gz)
    assert r["status"] == "unknown" and "passes over the gzip stream" in r["verdict"], r["verdict"]


def test_a_huge_pax_header_is_refused_before_tarfile_parses_it(tmp_path):
    """Both tarfile readers (NeMo's listing and torch.load's trace: tests/test_hostile_formats.py) refuse an extended
    header over 8 KiB before tarfile's regular expressions, quadratic before CPython 3.11.10, parse it."""
    pax = b"1" * (256 << 10)
    ti = tarfile.TarInfo("././@PaxHeader")
    ti.type, ti.size = tarfile.XHDTYPE, len(pax)
    p = tmp_path / "pax.nemo"
    p.write_bytes(ti.tobuf(tarfile.USTAR_FORMAT) + pax + bytes(1024))
    r, cpu = _timed(str(p))
    assert r["status"] == "unknown" and "extended header" in r["verdict"] and cpu < 2, (r["verdict"], cpu)


def test_members_written_outside_are_listed_within_bounds(tmp_path):
    p = tmp_path / "many.nemo"
    p.write_bytes(_archive({f"../x{i}": b"" for i in range(200)}))
    r = scan_path(str(p))
    assert r["status"] == "unsafe" and len(r["findings"]) == nemo.SHOWN
    assert "180 more member(s) written outside the folder" in " ".join(r["notes"])


def test_a_link_named_model_weights_is_followed_to_what_it_points_at(tmp_path):
    """NeMo before 2.2 extracts links; a model_weights.ckpt that links to a member of another name makes torch.load
    read that member (measured: tarfile's fully trusted extraction, then torch.load)."""
    marker = str(tmp_path / "ran")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for name, data in (("./model_config.yaml", _config()), ("./blob.dat", _saved({"x": _Open(marker)}))):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("./model_weights.ckpt")
        ti.type, ti.linkname = tarfile.SYMTYPE, "blob.dat"
        tar.addfile(ti)
    p = tmp_path / "linked.nemo"
    p.write_bytes(buf.getvalue())
    load = ("import sys, tarfile, torch; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted'); "
            "torch.load(sys.argv[2] + '/model_weights.ckpt', weights_only=False)")
    library_runner.python(load, str(p), str(tmp_path / "out"))
    assert os.path.exists(marker)
    r = scan_path(str(p))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [OPEN] and "through the link" in r["findings"][0]["record"]
