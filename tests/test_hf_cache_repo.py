"""A Hugging Face cache repository folder (`~/.cache/huggingface/hub/models--org--name`) as a model path: the
snapshot its `refs/main` names, as huggingface_hub resolves the default revision. The cache is written by
huggingface_hub's own snapshot_download from a stand-in Hub on a loopback socket (tests/remote_server.py; the
resolve route redirects to a CDN on another port, as the Hub's does)."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from conftest import fixture

sys.path.insert(0, os.path.dirname(__file__))
from hf_cache import REV as REV_HAND  # noqa: E402
from hf_cache import hf_repo  # noqa: E402
from remote_server import Server  # noqa: E402

REV = "0" * 40   # the commit the stand-in Hub names


@pytest.fixture(scope="module")
def downloaded(tmp_path_factory):
    """huggingface_hub's cache of org/bert (bert-tiny: model.safetensors, config.json) and org/gpt2, written once."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    folder = tmp_path_factory.mktemp("hf_cache")
    hub = {"org/bert": fixture("bert-tiny"), "org/gpt2": fixture("gpt2-tiny")}
    with Server(fixture("."), hub=hub, revisions=("main", REV)) as cdn, \
            Server(fixture("."), hub=hub, revisions=("main", REV), cdn=cdn.url) as s:
        for repo in hub:   # (endpoint given: huggingface_hub reads HF_ENDPOINT once, when it is imported)
            huggingface_hub.snapshot_download(repo, cache_dir=folder, endpoint=s.url, tqdm_class=None)
    assert os.path.islink(folder / "models--org--bert" / "snapshots" / REV / "model.safetensors")
    return folder


@pytest.fixture()
def cache(downloaded, tmp_path):
    """A copy of the cache each test may change (the snapshots' relative links kept as links)."""
    shutil.copytree(downloaded, tmp_path / "hub", symlinks=True)
    return tmp_path / "hub"


def test_a_cache_repository_opens_the_snapshot_refs_main_names(cache, cli):
    repo, snapshot = cache / "models--org--bert", cache / "models--org--bert" / "snapshots" / REV
    for command in ([], ["tensors"], ["ties"], ["stats"]):
        rc, out, err = cli(*command, str(repo), "--json")
        rc2, out2, _ = cli(*command, str(snapshot), "--json")
        assert rc == rc2 == 0, err
        ours, theirs = json.loads(out), json.loads(out2)
        ours.pop("seconds", None), theirs.pop("seconds", None)   # (stats times itself)
        assert ours == theirs   # the same report as the snapshot folder's
    summary = json.loads(cli(str(repo), "--json")[1])
    expected = json.loads(cli(fixture("bert-tiny"), "--json")[1])
    assert summary["parameters"] == expected["parameters"]
    assert os.path.dirname(summary["config"]) == str(snapshot)


def test_several_snapshots(cache, cli):
    repo = cache / "models--org--bert"
    other = repo / "snapshots" / ("1" * 40)
    shutil.copytree(repo / "snapshots" / REV, other, symlinks=True)
    rc, out, err = cli(str(repo), "--json")   # refs/main chooses
    assert rc == 0 and json.loads(out)["path"].startswith(str(repo / "snapshots" / REV))
    os.remove(repo / "refs" / "main")   # no refs/main: the choice is the user's
    rc, out, err = cli(str(repo))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "2 snapshots and no refs/main" in err and REV in err and "1" * 40 in err
    shutil.rmtree(other)   # one snapshot and no refs/main: that one
    assert cli(str(repo))[0] == 0


def test_refs_main_naming_a_missing_snapshot_or_a_link(cache, cli, tmp_path_factory):
    repo = cache / "models--org--bert"
    (repo / "refs" / "main").write_text("f" * 40)   # a revision downloaded in part, or deleted
    rc, out, err = cli(str(repo))
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1 and "f" * 40 in err and REV in err
    secret = tmp_path_factory.mktemp("outside") / "secret"
    secret.write_text(REV)
    os.remove(repo / "refs" / "main")
    os.symlink(secret, repo / "refs" / "main")   # a link out of the repository: not read
    rc, out, err = cli(str(repo))
    assert rc == 1 and "symbolic link" in err and len(err.strip().splitlines()) == 1


def test_a_snapshot_that_is_a_link_is_not_followed(cache, cli, tmp_path_factory):
    repo = cache / "models--org--gpt2"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(fixture("bert-tiny"), elsewhere / "model")
    shutil.rmtree(repo / "snapshots" / REV)
    os.symlink(elsewhere / "model", repo / "snapshots" / REV)
    rc, out, err = cli(str(repo))
    assert rc == 1 and out == "" and str(elsewhere) not in err   # refs/main names a revision no real folder holds
    assert f"refs/main names revision '{REV}', which snapshots/ does not hold (no snapshot)" in err


def test_the_cache_root_names_its_repositories(cache, cli):
    rc, out, err = cli(str(cache))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "2 repositories (models--org--bert, models--org--gpt2)" in err and "scan" in err


def test_scan_judges_a_cache_file_by_its_snapshot_name(tmp_path):
    """A cache's files are blobs named by their hash, reached through snapshot links: scan judges each under its
    snapshot name too, since loaders are chosen by name (a SavedModel's ops, Keras 2's keras_metadata.pb, a
    config's remote code, a chat template: judged as the blob alone, each went unread). The cache and a plain copy
    of the snapshot list the same files with the same verdicts, under the snapshot's names."""
    from ckptstat.analysis.scan import scan_path

    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    sources = {"": os.path.join(fixtures, "tf-saved-model-ops", "write_file"),
               "keras2": os.path.join(fixtures, "keras2-saved-model", "lambda_functional"),
               "templates": os.path.join(fixtures, "chat-templates")}
    files = {}
    for prefix, folder in sources.items():
        for here, _, names in os.walk(folder):
            for n in names:
                rel = os.path.relpath(os.path.join(here, n), folder)
                files[os.path.join(prefix, rel) if prefix else rel] = open(os.path.join(here, n), "rb").read()
    files["config.json"] = b'{"model_type": "llama", "auto_map": {"AutoModel": "modeling.Model"}}'
    snap = hf_repo(tmp_path / "cache", files)
    plain = tmp_path / "plain"
    shutil.copytree(snap, plain, symlinks=False)
    want = {f["path"]: f["status"] for f in scan_path(str(plain))["files"]}
    assert want["saved_model.pb"] == "unsafe" and want["config.json"] == "unknown", want
    assert want[os.path.join("keras2", "keras_metadata.pb")] == "unsafe", want
    for root in (tmp_path / "cache", snap.parent.parent):
        got = scan_path(str(root))["files"]
        prefix = os.path.relpath(snap, root) + os.sep
        assert {f["path"].removeprefix(prefix): f["status"] for f in got} == want, root


def test_audit_passes_over_an_interrupted_downloads_incomplete_blob(cache, cli, tmp_path):
    """huggingface_hub downloads a file into blobs/<etag>.incomplete and renames it once whole, linking it into the
    snapshot then; an interrupted download leaves the part, which scan_cache_dir lists among its incomplete files, of
    no revision. audit took it for a checkpoint of its own: a record "tensors end at byte N but the file has M bytes
    (truncated)" beside the repository's own, and exit 1."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    repo = cache / "models--org--bert"
    link = repo / "snapshots" / REV / "model.safetensors"
    blob = os.path.realpath(link)
    part = blob + ".incomplete"   # what the interrupted download left: the first half of the file, no link to it
    with open(blob, "rb") as f, open(part, "wb") as g:
        g.write(f.read(os.path.getsize(blob) // 2))
    os.unlink(blob), os.unlink(link)
    info = huggingface_hub.scan_cache_dir(cache)
    assert {str(f.file_path) for f in info.incomplete_files} == {part}   # the library's own reading of its cache
    assert all(str(f.blob_path) != part for r in info.repos for rev in r.revisions for f in rev.files)
    out = tmp_path / "audit.jsonl"
    rc, _, err = cli("audit", str(repo), "--out", str(out), "--json")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in records if r["path"].endswith(".incomplete")], records
    assert rc == 0 and not [r for r in records if r["error"]], (err, records)


def _cached(cache, folder: str, name: str):
    """`folder`'s files (subfolders too) as the snapshot of the cache repository `name` (tests/hf_cache.py)."""
    files = {os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
             for d, _, names in os.walk(folder) for f in names}
    hf_repo(cache, files, name)
    return cache / name


def test_summary_of_a_cached_pipeline_or_adapter_is_the_snapshots(tmp_path, cli):
    """`ckptstat ~/.cache/huggingface/hub/models--org--name` of a diffusers pipeline was refused as "a diffusers
    pipeline ...: `ckptstat summary` totals every component" (by summary itself), and a PEFT adapter's got the plain
    summary of its weights, not the adapter report: the pipeline and adapter checks looked at the repository folder,
    not the snapshot refs/main names. Oracles: each component's parameters() (diffusers), peft's trainable count."""
    from conftest import fixture_script

    make_adapters = fixture_script("make_adapters")
    pipe = str(tmp_path / "pipe")
    components = make_adapters.write_pipeline("dit", pipe)
    adapter = str(tmp_path / "lora")
    peft_counts = make_adapters.write_adapter("llama-dora", adapter)
    repo = _cached(tmp_path / "hub", pipe, "models--org--pipe")
    rc, out, err = cli(str(repo), "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert {c["component"]: c["params"] for c in r["components"] if c["status"] == "weights"} == components
    assert r == json.loads(cli(str(repo / "snapshots" / REV_HAND), "--json")[1])
    repo = _cached(tmp_path / "hub", os.path.join(adapter, "adapter"), "models--org--lora")
    for args in (["--json"], ["summary", "--json"]):
        rc, out, err = cli(*args, str(repo))
        assert rc == 0, err
        r = json.loads(out)
        assert r["schema"] == "ckptstat.adapter/1" and r["parameters"]["trainable"] == peft_counts["trainable"], r


def test_a_snapshot_without_weights_names_the_others(cache, cli):
    """refs/main moved on to a revision of which only config.json was fetched (AutoConfig after a new commit), the
    weights being in the older snapshot: huggingface_hub finds no model.safetensors at main (try_to_load_from_cache)
    and does at the older revision. ckptstat said "folder holds no weights file" alone; it now names the other
    snapshots, and for the `snapshots/` folder itself, the snapshots in it."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    repo = cache / "models--org--bert"
    new = "2" * 40
    (repo / "snapshots" / new).mkdir()
    os.symlink(os.readlink(repo / "snapshots" / REV / "config.json"), repo / "snapshots" / new / "config.json")
    (repo / "refs" / "main").write_text(new)
    assert huggingface_hub.try_to_load_from_cache("org/bert", "model.safetensors", cache_dir=cache) is None
    assert huggingface_hub.try_to_load_from_cache("org/bert", "model.safetensors", cache_dir=cache, revision=REV)
    for path in (repo, repo / "snapshots"):
        rc, out, err = cli(str(path), "--json")
        assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "holds no weights file" in err and f"snapshots: {REV}" in err and "pass one that holds the weights" in err


def test_a_snapshot_of_two_formats_reads_what_transformers_loads(cache, cli, monkeypatch):
    """A snapshot holding model.safetensors and pytorch_model.bin (many Hub repositories ship both): transformers loads
    model.safetensors and the note names pytorch_model.bin as not read; once the safetensors blob is deleted (its link
    dangling), transformers loads pytorch_model.bin, and so does ckptstat, saying why (it said "also holds
    model.safetensors, not read: transformers loads pytorch_model.bin first", which is not so)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = cache / "models--org--bert"
    snap = repo / "snapshots" / REV
    safe = load_file(snap / "model.safetensors")
    blob = repo / "blobs" / "bin"   # (huggingface_hub names blobs by their etag; any name reads the same)
    torch.save({k: v + 1 for k, v in safe.items()}, blob)
    os.symlink(os.path.relpath(blob, snap), snap / "pytorch_model.bin")

    def loaded() -> str:
        model = transformers.AutoModel.from_pretrained("org/bert", cache_dir=cache, local_files_only=True)
        name, value = next((k, v) for k, v in model.state_dict().items() if k in safe and safe[k].numel() > 1)
        return "model.safetensors" if torch.equal(value, safe[name]) else "pytorch_model.bin"

    assert loaded() == "model.safetensors"
    r = json.loads(cli(str(repo), "--json")[1])
    assert r["path"] == str(snap / "model.safetensors")
    assert "the folder also holds pytorch_model.bin, not read" in " ".join(r["notes"])
    os.unlink(os.path.realpath(snap / "model.safetensors"))
    assert loaded() == "pytorch_model.bin"
    r = json.loads(cli(str(repo), "--json")[1])
    assert r["path"] == str(snap / "pytorch_model.bin")
    assert any(n.startswith("model.safetensors: no file to read") for n in r["notes"]), r["notes"]
    assert "also holds" not in " ".join(r["notes"])
