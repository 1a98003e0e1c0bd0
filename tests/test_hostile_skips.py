"""The twelfth red-team pass (docs/security.md, "Checks added by the twelfth red-team pass"): what a scan skipped,
stopped at, or read past. Each payload is run by the real loader in a throw-away process (it creates a marker file),
and `ckptstat scan` / `audit` run as a user runs them, as a subprocess."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile

import library_runner
import numpy as np
import pytest
from conftest import ROOT, fixture

BIG = (1 << 20) + 12_345   # a string longer than the walk's 64 KiB read chunk, not a multiple of it


def ckptstat(*args: str) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return r.returncode, r.stdout, r.stderr


def runs(code: str, path: str, marker: str) -> bool:
    """Whether the real loader (`code`, reading sys.argv[1]) runs the payload: the marker file appears."""
    library_runner.python(code, path)
    ran = os.path.exists(marker)
    if ran:
        os.remove(marker)
    return ran


class _Opens:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _padded_payload(marker: str) -> bytes:
    """A pickle holding a big string the walk skips over, then a call of open(marker, 'w')."""
    return pickle.dumps(["X" * BIG, _Opens(marker)], protocol=2)


# --- a payload after a big argument in a compressed stream --------------------------------------------------------

def _torch_zip_deflated(path: str, data_pkl: bytes) -> None:
    """torch.save's archive with its data.pkl replaced and deflated (torch's reader inflates deflated records)."""
    import torch

    plain = path + ".plain"
    torch.save({"w": torch.zeros(2)}, plain)
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(path, "w") as z:
        for info in zin.infolist():
            if info.filename.endswith("/data.pkl"):
                z.writestr(info.filename, data_pkl, compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(info, zin.read(info.filename))
    os.remove(plain)


def test_a_payload_after_a_big_string_in_a_deflated_or_gzipped_pickle_is_seen(tmp_path):
    """The walk skips a big argument by decompressing and dropping it; the decompressors hand back a chunk (64 KiB)
    whatever was asked, and what came past the argument was dropped with it: the payload after it was never walked.
    np.savez_compressed writes exactly that for an object array whose first item is a long string: `safe` (exit 0);
    a gzip'd pickle `safe`; a torch archive with a deflated data.pkl 'torch.load raises' (exit 2), and in a folder
    under a name without a pickle extension not listed at all (exit 0)."""
    marker = str(tmp_path / "ran")
    folder = tmp_path / "run"
    folder.mkdir()
    a = np.empty(2, dtype=object)
    a[0], a[1] = "X" * BIG, _Opens(marker)
    np.savez_compressed(folder / "arrays.npz", a=a)
    (folder / "model.pkl.gz").write_bytes(gzip.compress(_padded_payload(marker)))
    _torch_zip_deflated(str(folder / "checkpoint_best"), _padded_payload(marker))
    assert runs("import numpy, sys; numpy.load(sys.argv[1], allow_pickle=True)['a']", str(folder / "arrays.npz"), marker)
    assert runs("import gzip, pickle, sys; pickle.load(gzip.open(sys.argv[1]))", str(folder / "model.pkl.gz"), marker)
    assert runs("import torch, sys; torch.load(sys.argv[1], weights_only=False)", str(folder / "checkpoint_best"), marker)
    rc, out, err = ckptstat("scan", str(folder), "--json")
    assert rc == 1, err
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert {p: f["status"] for p, f in files.items()} == {
        "arrays.npz": "unsafe", "model.pkl.gz": "unsafe", "checkpoint_best": "unsafe"}
    assert all(f["unsafe_globals"] == [f"{open.__module__}.open"] for f in files.values())


# --- a config a folder scan did not list because scan could not read it whole --------------------------------------

HOSTILE_TEMPLATE = "{{ messages.__class__.__mro__ }}"


def _tokenizer_folder(folder) -> None:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"a": 0, "<unk>": 1},
                                                                                    unk_token="<unk>")))
    tok.save_pretrained(folder)


@pytest.mark.parametrize("form", ["dict", "list with a None", "over 64 MiB"])
def test_a_tokenizer_config_scan_cannot_read_is_listed_not_dropped(form, tmp_path):
    """The chat template transformers renders, in forms scan raised on: a dict name -> template (the tokenizer keeps it
    and renders its "default"), a list whose other entry's template is None (loads: never compiled), a
    tokenizer_config.json past the 64 MiB scan reads (transformers reads any). The folder scan did not list the file
    (a config's error drops it, as any file without a pickle's name that no loader reads): exit 0."""
    transformers = pytest.importorskip("transformers")
    _tokenizer_folder(tmp_path)
    path = tmp_path / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = ({"default": HOSTILE_TEMPLATE} if form == "dict" else
                               [{"name": "default", "template": HOSTILE_TEMPLATE}, {"name": "rag", "template": None}]
                               if form.startswith("list") else HOSTILE_TEMPLATE)
    text = json.dumps(config)
    if form.startswith("over"):
        text = text[:-1] + ', "padding": "' + " " * (64 << 20) + '"}'
    path.write_text(text)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path).get_chat_template() == HOSTILE_TEMPLATE
    rc, out, err = ckptstat("scan", str(tmp_path), "--json")
    assert rc == 1, err
    files = {f["path"]: f["status"] for f in json.loads(out)["files"]}
    assert files == {"tokenizer_config.json": "unknown" if form.startswith("over") else "unsafe"}


def test_a_saved_model_past_the_bytes_scan_reads_is_unknown_not_dropped(tmp_path):
    """A saved_model.pb larger than `index_bytes` (frozen graphs with their constants reach it) was an error, and so
    not listed by a folder scan: exit 0 for TensorFlow 2.21's WriteFile model (fixtures/make_saved_model_ops.py)."""
    import shutil

    from conftest import FIXTURES

    shutil.copytree(os.path.join(FIXTURES, "tf-saved-model-ops", "write_file"), tmp_path / "model")
    rc, out, err = ckptstat("--limit", "index_bytes=4096", "scan", str(tmp_path / "model"), "--json")
    assert rc == 1, err
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {"saved_model.pb": "unknown"}


# --- a folder walk that stopped, or passed over a folder in silence ------------------------------------------------

def _payload_zip(path: str, marker: str) -> None:
    """A torch archive whose pickle calls open(marker, 'w') (stored, as torch.save writes it)."""
    _torch_zip_deflated(path, pickle.dumps(_Opens(marker), protocol=2))


def _nested_payload(folder, name: str, depth: int, marker: str) -> None:
    """`folder`/name/name/... `depth` folders down, a payload pytorch_model.bin at the bottom (made from inside, one
    level at a time: the whole path may run past PATH_MAX)."""
    here = os.getcwd()
    os.makedirs(folder)
    os.chdir(folder)
    try:
        for _ in range(depth):
            os.mkdir(name)
            os.chdir(name)
        _payload_zip("pytorch_model.bin", marker)
    finally:
        os.chdir(here)


def test_a_tree_deeper_than_pythons_recursion_is_walked(tmp_path):
    """CPython 3.11's os.walk recurses: 1,100 nested folders made `scan` end in `internal error: RecursionError`."""
    folder = tmp_path / "deep"
    _nested_payload(folder, "a", 1_100, str(tmp_path / "ran"))
    try:
        rc, out, err = ckptstat("scan", str(folder), "--json")
    finally:
        _remove_nested(folder, 1_100)
    assert rc == 1 and "internal error" not in err, err
    (f,) = json.loads(out)["files"]
    assert f["status"] == "unsafe" and f["path"].endswith("/a/pytorch_model.bin") and f["path"].count("/") == 1_100


def _remove_nested(folder, depth: int) -> None:
    """Remove `folder`/a/a/... bottom up (shutil.rmtree, and so pytest's clean-up, recurses: RecursionError)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        for _ in range(depth):
            os.chdir("a")
        for name in os.listdir("."):
            os.remove(name)
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("a")
    finally:
        os.chdir(here)


def test_a_folder_the_walk_cannot_list_is_skipped_not_passed_over(tmp_path):
    """os.walk passes over a folder it cannot list in silence (onerror=None): a tree whose path runs past PATH_MAX
    (20 folders of 250 characters), `0 file(s) scanned`, exit 0; audit wrote no record, exit 0. Now scan lists it as
    skipped and audit records the error: exit 1."""
    folder = tmp_path / "long"
    _nested_payload(folder, "d" * 250, 20, str(tmp_path / "ran"))
    rc, out, err = ckptstat("scan", str(folder), "--json")
    r = json.loads(out)
    assert rc == 1 and r["files"] == [] and r["totals"]["skipped"] == 1, (r, err)
    assert r["skipped"][0]["why"].startswith("a folder: cannot list it")
    rc, out, err = ckptstat("audit", str(folder), "--out", str(tmp_path / "audit.jsonl"))   # (audit: exit 0, no record)
    (rec,) = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert rc == 1 and rec["error"].startswith("cannot list the folder ("), (rec, err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists a folder without the read permission")
def test_an_unreadable_subfolder_is_skipped_not_passed_over(tmp_path):
    """A folder without read permission (an extracted tar's mode 311): from_pretrained still opens
    text_encoder/pytorch_model.bin by its name (search permission), os.walk passed over it in silence: exit 0."""
    sub = tmp_path / "text_encoder"
    sub.mkdir()
    _payload_zip(str(sub / "pytorch_model.bin"), str(tmp_path / "ran"))
    sub.chmod(0o311)
    try:
        rc, out, err = ckptstat("scan", str(tmp_path), "--json")
    finally:
        sub.chmod(0o755)
    r = json.loads(out)
    assert rc == 1 and r["skipped"] == [{"path": "text_encoder", "why": "a folder: cannot list it (Permission denied)"}]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without the read permission")
def test_a_file_without_a_pickle_name_scan_cannot_read_is_skipped_not_dropped(tmp_path):
    """A file scan cannot open (its permissions; a loader running as another user can) under a name without a pickle
    extension: dropped as if no loader read a pickle from it, exit 0 (audit: no row in its Trainer folder's record).
    Now skipped: exit 1 (audit: an `unreadable` row)."""
    run = tmp_path / "checkpoint-5"
    run.mkdir()
    (run / "trainer_state.json").write_text("{}")
    _payload_zip(str(run / "weights"), str(tmp_path / "ran"))
    (run / "weights").chmod(0)
    rc, out, err = ckptstat("scan", str(run), "--json")
    r = json.loads(out)
    assert rc == 1 and r["skipped"] == [{"path": "weights", "why": "cannot read it (Permission denied)"}], r
    ckptstat("audit", str(tmp_path), "--out", str(tmp_path / "audit.jsonl"))
    (rec,) = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert {os.path.basename(f["file"]): f["status"] for f in rec["scan"]["files"]} == {"weights": "unreadable"}, rec


# --- a link out of a folder read before it was refused ------------------------------------------------------------

def test_a_trainer_folders_link_out_of_it_is_refused_before_it_is_read(tmp_path):
    """A Trainer checkpoint whose optimizer.pt links out of the folder. `summary` opened each file of the folder as a
    file the user named (a link allowed), parsed it, and refused the link only after: the outside file's own error came
    back (its deflated data.pkl past `pickle_ratio`). `audit` listed every file under a Trainer or SavedModel folder,
    links out of the root included, and scanned the outside file (its globals in the record)."""
    import torch

    run = tmp_path / "run" / "checkpoint-500"
    run.mkdir(parents=True)
    (run / "trainer_state.json").write_text("{}")
    torch.save({"w": torch.zeros(3)}, run / "pytorch_model.bin")
    torch.save({"last_epoch": 1}, run / "scheduler.pt")
    (tmp_path / "elsewhere").mkdir()
    _torch_zip_deflated(str(tmp_path / "elsewhere" / "optimizer.pt"), _padded_payload(str(tmp_path / "ran")))
    os.symlink("../../elsewhere/optimizer.pt", run / "optimizer.pt")
    rc, out, err = ckptstat("summary", str(run))
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "'optimizer.pt' is a symlink to" in err and "outside the checkpoint" in err and "pickle_ratio" not in err
    rc, out, err = ckptstat("audit", str(tmp_path / "run"), "--out", str(tmp_path / "audit.jsonl"))
    (rec,) = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert rc == 1 and "outside the checkpoint" in rec["error"], rec
    assert sorted(os.path.basename(f["file"]) for f in rec["scan"]["files"]) == ["pytorch_model.bin", "scheduler.pt"]


# --- names a remote checkpoint gives, read as a server reads them --------------------------------------------------

@pytest.mark.parametrize("shard", ["..%2Fprivate%2Fmodel.safetensors", "%2e%2e%2fprivate%2fmodel.safetensors", "%2E%2E",
                                   "model.safetensors?x=1", "model.safetensors#x"])
def test_a_remote_indexs_shard_is_a_file_of_its_folder(shard, tmp_path):
    """An index's shard is a file name in its folder: locally no `/`; over a URL the server decodes `..%2F` (the
    loopback server read /private/model.safetensors for /models/a/..%2Fprivate%2F...) and the client resolves
    `%2E%2E` itself (it fetched the server's root). Refused before any request, one line naming the shard."""
    import torch
    from remote_server import Server
    from safetensors.torch import save_file

    (tmp_path / "models" / "a").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    save_file({"secret.weight": torch.zeros(7, 3)}, str(tmp_path / "private" / "model.safetensors"))
    save_file({"secret.weight": torch.zeros(7, 3)}, str(tmp_path / "models" / "a" / "model.safetensors"))
    index = tmp_path / "models" / "a" / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"secret.weight": shard}}))
    with Server(str(tmp_path)) as s:
        rc, out, err = ckptstat("tensors", f"{s.url}/models/a/model.safetensors.index.json")
        paths = {p for _, p, _ in s.log}
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "outside the checkpoint" in err, err
    assert all(p.startswith("/models/a/") for p in paths) and "/models/a/model.safetensors" not in paths, paths


def test_a_folder_listings_encoded_parent_links_are_not_followed(tmp_path):
    """`scan URL/` of a folder whose listing links `..%2Fprivate%2Fmodel.bin` and `%2E%2E` (file names the server
    lists as they are): the walk read /private/model.bin and walked the server's root 32 folders deep
    (`%2E%2E` resolved by the client), then stopped: 'folders nested more than 32 deep'."""
    from remote_server import Server

    (tmp_path / "models" / "a").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    _payload_zip(str(tmp_path / "private" / "model.bin"), str(tmp_path / "ran"))
    for name in ("..%2Fprivate%2Fmodel.bin", "%2E%2E"):
        (tmp_path / "models" / "a" / name).write_bytes(b"placeholder")
    with Server(str(tmp_path)) as s:
        rc, out, err = ckptstat("scan", f"{s.url}/models/a/", "--json")
        paths = {p for _, p, _ in s.log}
    assert rc == 0 and json.loads(out)["files"] == [], err
    assert paths == {"/models/a/"}, paths


@pytest.mark.parametrize("location", ["http://127.0.0.1:1:80/x", "http://[::1/x", "http://[::1]:99999/x"])
@pytest.mark.parametrize("command", ["summary", "scan"])
def test_a_redirect_to_a_malformed_url_is_one_line(location, command, tmp_path):
    """A `Location` whose port is no number or out of range, or whose IPv6 literal is unclosed: urlsplit raises
    ValueError in the redirect policy (or in urljoin), which ended as `internal error: ValueError` (exit 1)."""
    import torch
    from remote_server import Server

    torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt")
    with Server(str(tmp_path), redirects={"/model.pt": location}) as s:
        rc, out, err = ckptstat(command, f"{s.url}/model.pt")
        asked = s.requests["GET"] + s.requests["HEAD"]
    assert rc in (1, 2) and len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    assert "refused a redirect to" in err and "not a URL" in err and asked == 1, (err, asked)


# --- code a sentence-transformers folder makes its loader import ------------------------------------------------

# modules.json as sentence-transformers 5.1.0's save writes it (SentenceTransformer([Transformer, Pooling]).save), the
# Pooling's class swapped for one in a module of the folder.
ST_MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "pooling_ext.Pooling"}]


def test_a_sentence_transformers_module_of_the_folder_is_named(tmp_path):
    """sentence-transformers before 6.1 loads a local folder's `module.Class` from `module.py` in the folder with no
    trust_remote_code (5.1.0 ran it, 6.3.0 asks for the flag: measured on this folder in a throw-away venv; the library
    is not in the test lock). The folder scan looked at neither modules.json nor the .py: `0 file(s) scanned`, exit 0.
    Now `unknown`, as an auto_map's module is."""
    import shutil

    from conftest import FIXTURES

    shutil.copytree(os.path.join(FIXTURES, "bert-tiny"), tmp_path, dirs_exist_ok=True)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 128,
                                                                     "pooling_mode_mean_tokens": True}))
    (tmp_path / "modules.json").write_text(json.dumps(ST_MODULES, indent=2))
    (tmp_path / "pooling_ext.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n"
                                             "from sentence_transformers.models import Pooling\n")
    rc, out, err = ckptstat("scan", str(tmp_path), "--json")
    assert rc == 1, err
    (f,) = json.loads(out)["files"]
    assert f["path"] == "modules.json" and f["status"] == "unknown"
    assert f["unknown"] == ["modules.json: 'pooling_ext.Pooling', pooling_ext.py in this folder: sentence-transformers "
                            "imports it and its Python runs"]
    (tmp_path / "modules.json").write_text(json.dumps(ST_MODULES[:1], indent=2))   # its own classes only: not listed
    rc, out, err = ckptstat("scan", str(tmp_path), "--json")
    assert rc == 0 and json.loads(out)["files"] == [], err


# --- what torch.hub loads from a download -------------------------------------------------------------------------

def test_a_zip_of_one_pickle_is_judged_as_torch_hub_loads_it(tmp_path):
    """torch.hub.load_state_dict_from_url (weights_only=False by default) takes a download that is a zip of one file
    for a pre-1.6 zipped state_dict: it extracts the file and torch.loads it. torch.load of the zip raises (no
    data.pkl): scan said 'unreadable' (exit 2) for `resnet18-5c106cde.pth` in the hub's cache, and a folder scan did
    not list such a zip under a name without a pickle extension (exit 0)."""
    import torch

    marker = str(tmp_path / "ran")
    cache = tmp_path / "checkpoints"
    cache.mkdir()
    with zipfile.ZipFile(cache / "resnet18-5c106cde.pth", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("resnet18.pth", pickle.dumps(_Opens(marker), protocol=2))
    with zipfile.ZipFile(cache / "weights", "w", zipfile.ZIP_STORED) as z:
        z.writestr("w.pth", pickle.dumps(_Opens(marker), protocol=2))
    torch.save({"w": torch.zeros(2)}, tmp_path / "plain.pt")
    with zipfile.ZipFile(cache / "plain-1234abcd.pth", "w", zipfile.ZIP_DEFLATED) as z:
        z.write(tmp_path / "plain.pt", "plain.pt")
    with zipfile.ZipFile(cache / "notes.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.txt", "not a checkpoint\n")
    hub = ("import sys, torch.hub; torch.hub.load_state_dict_from_url('file://' + sys.argv[1], "
           f"model_dir={str(tmp_path / 'extracted')!r})")
    assert runs(hub, str(cache / "resnet18-5c106cde.pth"), marker)
    assert runs(hub, str(cache / "weights"), marker)
    rc, out, err = ckptstat("scan", str(cache), "--json")
    assert rc == 1, err
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert {p: f["status"] for p, f in files.items()} == {
        "resnet18-5c106cde.pth": "unsafe", "weights": "unsafe", "plain-1234abcd.pth": "safe"}
    assert files["weights"]["unsafe_globals"] == [f"{open.__module__}.open"]
    assert "torch.hub" in files["weights"]["verdict"]


# --- a Keras config past what scan reads -------------------------------------------------------------------------

_LAMBDA_KERAS = '''import os, sys, zipfile
import keras
path, marker = sys.argv[1], sys.argv[2]
f = eval(f"lambda x: (__import__('os').makedirs({marker!r}, exist_ok=True), x)[1]")
inp = keras.Input((3,))
keras.Model(inp, keras.layers.Lambda(f)(inp)).save(path + ".plain.keras")
os.rmdir(marker)
with zipfile.ZipFile(path + ".plain.keras") as src, zipfile.ZipFile(path, "w") as dst:
    for info in src.infolist():
        data = src.read(info.filename)
        dst.writestr(info, data + b" " * (17 << 20) if info.filename == "config.json" else data)
os.remove(path + ".plain.keras")
'''


def test_a_keras_config_past_what_scan_reads_is_unknown_not_unreadable(tmp_path):
    """A `.keras` whose Lambda model's config.json is padded past the 16 MiB scan reads (JSON whitespace: keras reads it
    whole and load_model(safe_mode=False) runs the Lambda, measured): 'config.json in the archive is ... bytes', exit 2
    and `unreadable` in a folder, as if nothing would load it. Now `unknown` (exit 1), the bound named."""
    marker = str(tmp_path / "RAN")
    path = str(tmp_path / "model.keras")
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path / "home")}
    library_runner.python(_LAMBDA_KERAS, path, marker, env=env, check=True)
    load = "import sys, keras; keras.saving.load_model(sys.argv[1], safe_mode=False)"
    library_runner.python(load, path, env=env)
    assert os.path.isdir(marker)
    rc, out, err = ckptstat("scan", path, "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "scan reads" in r["unknown"][0], (r, err)


def test_audit_fails_on_a_file_scan_cannot_read(tmp_path):
    """A Trainer folder whose rng_state.pth scan cannot read (a damaged zip): `scan DIR` exits 2 for it, `audit` exited 0
    with the record's scan verdict `unreadable`, a gate passing a file nothing vouched for. Now exit 1, the folder
    listed under what scan could not read."""
    run = tmp_path / "run" / "checkpoint-5"
    shutil.copytree(fixture("bert-tiny"), run)
    (run / "trainer_state.json").write_text('{"global_step": 5}')
    (run / "rng_state.pth").write_bytes(b"PK\x03\x04damaged")
    rc, out, err = ckptstat("scan", str(run))
    assert rc == 2, (out, err)
    rc, out, err = ckptstat("audit", str(tmp_path / "run"), "--out", str(tmp_path / "audit.jsonl"), "--json")
    assert rc == 1, (out, err)
    assert json.loads(out)["unreadable"] == [str(run)]


def test_audit_fails_on_what_its_walk_refuses_as_scan_does(tmp_path):
    """A folder holding a link out of it, links to folders and a FIFO beside a checkpoint: `scan DIR` lists each as
    skipped and exits 1, while `audit` counted them among its skipped files (config.json, READMEs) and exited 0. Now the
    paths it refuses are listed (`run.refused`: the same as scan's skipped) and fail the run; the files no unit takes
    alone do not."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    shutil.copytree(fixture("bert-tiny"), root)
    (root / "README.md").write_text("# model\n")
    outside.mkdir()
    shutil.copy(fixture("bert-tiny/model.safetensors"), outside / "x.bin")
    rc, out, err = ckptstat("audit", str(root), "--out", str(tmp_path / "a.jsonl"), "--json")
    assert rc == 0 and json.loads(out)["run"]["refused"] == [], (out, err)
    os.symlink("../outside", root / "linkdir")
    os.symlink(str(outside / "x.bin"), root / "out.bin")
    os.mkfifo(root / "fifo.pt")
    rc, out, _ = ckptstat("scan", str(root), "--json")
    assert rc == 1
    scan_skipped = sorted(str(root / s["path"]) for s in json.loads(out)["skipped"])
    rc, out, err = ckptstat("audit", str(root), "--out", str(tmp_path / "b.jsonl"), "--json")
    assert rc == 1, err
    assert sorted(json.loads(out)["run"]["refused"]) == scan_skipped == sorted(
        str(root / n) for n in ("linkdir", "out.bin", "fifo.pt"))
