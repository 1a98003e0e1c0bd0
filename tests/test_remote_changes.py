"""`ckptstat scan URL` against servers whose answers disagree with the bytes a loader gets (docs/security.md,
thirteenth pass), served over loopback (tests/remote_server.py) to the CLI in a subprocess. The oracle is the real
loader in a throw-away process running the payload (it creates a folder).

- a file replaced between two of scan's range requests, its ETag changing with it: scan judged the first window of
  one file and the rest of the other, and called the chimera safe while the file now served runs its payload
  (sources/remote.py `Blob._http`: the file changed while it was read, one line, exit 2);
- a pickle the server labels `text/html`, a link among its bytes: scan took its URL for a folder's listing page, and
  `scan URL` of the file said `0 file(s) scanned`, exit 0, while torch.hub.load_state_dict_from_url(URL) ran it
  (sources/remote.py `Blob.listing_page`: a page by its bytes as well as its label)."""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import library_runner
import pytest

torch = pytest.importorskip("torch")

from remote_server import Server, moto_s3  # noqa: E402


class _Mkdir:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _runs(code: str, target: str, marker) -> bool:
    library_runner.python(code, target, env={**os.environ, "TORCH_HOME": str(marker.parent / "torch_home")})
    return marker.is_dir()


def _scan(target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptstat", "scan", target], capture_output=True, text=True,
                          timeout=120)


def _swapped(marker) -> tuple[bytes, bytes]:
    """A torch.save of 200 KB (data.pkl in scan's first window, the central directory in a later range), and the same
    bytes with data.pkl replaced by a payload of its length (torch's miniz does not check CRCs)."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(50_000), "pad": "y" * 60}, buf)
    a = buf.getvalue()
    info = next(i for i in zipfile.ZipFile(io.BytesIO(a)).infolist() if i.filename.endswith("/data.pkl"))
    name_len, extra_len = struct.unpack_from("<HH", a, info.header_offset + 26)   # the local header's, as miniz reads
    start = info.header_offset + 30 + name_len + extra_len
    evil = pickle.dumps({"w": _Mkdir(str(marker))}, protocol=2)
    assert len(evil) <= info.file_size
    return a, a[:start] + evil.ljust(info.file_size, b".") + a[start + info.file_size:]


def test_a_file_replaced_between_ranges(tmp_path):
    marker = tmp_path / "ran"
    benign, hostile = _swapped(marker)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "model.bin").write_bytes(benign)
    (tmp_path / "srv" / "next.bin").write_bytes(hostile)
    assert _runs("import sys, torch; torch.load(sys.argv[1], weights_only=False)", str(tmp_path / "srv" / "next.bin"),
                 marker)
    with Server(str(tmp_path / "srv"), etags=True, swap={"/model.bin": (1, "next.bin")}) as s:
        p = _scan(f"{s.url}/model.bin")
        assert s.served["/model.bin"] >= 2   # (the swap happened: scan read past its first window)
    assert p.returncode == 2 and "the file changed while it was read" in p.stderr, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    with Server(str(tmp_path / "srv"), etags=True) as s:   # one version throughout: read as before
        assert _scan(f"{s.url}/model.bin").returncode == 0


def test_a_listing_page_is_still_a_folder(tmp_path):
    (tmp_path / "srv" / "sub").mkdir(parents=True)
    (tmp_path / "srv" / "sub" / "model.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with Server(str(tmp_path / "srv")) as s:
        p = _scan(f"{s.url}/sub")
    assert p.returncode == 0 and "1 file(s) scanned: 1 safe" in p.stdout, (p.stdout, p.stderr)


def _legacy_tar(marker) -> bytes:
    """torch < 0.4's format, which torch.load (weights_only=False) still reads: a tar whose `storages`, `tensors` and
    `pickle` members it unpickles by name, after a first member named like a page (`<html>...`)."""
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("<html><body>index</body></html>", b"x"),
                           ("storages", pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2)),
                           ("tensors", pickle.dumps(0, protocol=2)), ("pickle", pickle.dumps(_Mkdir(str(marker))))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _page_then_zip(marker) -> bytes:
    """An HTML page, then a zip of one pickle: zipfile finds the zip by its end record, so torch.hub extracts it."""
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("resnet18.pth", pickle.dumps(_Mkdir(str(marker)), protocol=2))
    return b'<html><body><a href="resnet18.pth">resnet18.pth</a></body></html>\n' + z.getvalue()


def _pickle_with_a_link(marker) -> bytes:
    """A pickle whose string holds a link: taken for a listing page while any text/html reply was one."""
    return pickle.dumps((_Mkdir(str(marker)), '<a href="zz">z</a>'), protocol=2)


@pytest.mark.parametrize("name, build", [("model.pkl", _pickle_with_a_link), ("checkpoint_best", _pickle_with_a_link),
                                         ("model_best.pth.tar", _legacy_tar), ("resnet18.zip", _page_then_zip)])
def test_a_file_labelled_html(tmp_path, name, build):
    """A file a server labels text/html, which torch.hub.load_state_dict_from_url(URL) runs whatever the label: a
    pickle (was `0 file(s) scanned` while a listing page was any text/html reply; now one whose bytes start with `<`),
    and files that start with a tag (was the same while a page was text/html starting with `<`; now a page that is not
    plain text, control bytes or a tar header, is a file too: sources/remote.py `Blob.plain_page`)."""
    marker = tmp_path / "ran"
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / name).write_bytes(build(marker))
    label = {"ctypes": {f"/{name}": "text/html", f"/{name}/": "text/html"}}
    with Server(str(tmp_path / "srv"), **label) as s:
        assert _runs("import sys, torch; torch.hub.load_state_dict_from_url(sys.argv[1], progress=False)",
                     f"{s.url}/{name}", marker)
        file_scan, folder_scan = _scan(f"{s.url}/{name}"), _scan(f"{s.url}/")
    assert file_scan.returncode == 1 and "UNSAFE" in file_scan.stdout, (file_scan.stdout, file_scan.stderr)
    assert folder_scan.returncode == 1 and f"UNSAFE     {name}" in folder_scan.stdout, folder_scan.stdout


def test_a_page_a_file_name_fills_with_control_bytes_is_still_walked(tmp_path):
    """A file named with ESC puts the byte in its folder's listing page (the server escapes HTML, not controls): the
    page is then also judged as a file (nothing a loader reads: not listed), and its links are walked as before."""
    (tmp_path / "srv" / "sub").mkdir(parents=True)
    (tmp_path / "srv" / "sub" / "a\x1bb.txt").write_bytes(b"text")
    (tmp_path / "srv" / "sub" / "model.pkl").write_bytes(pickle.dumps(_Mkdir(str(tmp_path / "ran")), protocol=2))
    with Server(str(tmp_path / "srv")) as s:
        root, sub = _scan(f"{s.url}/"), _scan(f"{s.url}/sub")
    assert root.returncode == 1 and "UNSAFE     sub/model.pkl" in root.stdout, (root.stdout, root.stderr)
    assert "1 file(s) scanned: 0 safe, 1 unsafe" in root.stdout, root.stdout
    assert sub.returncode == 1 and "1 file(s) scanned: 0 safe, 1 unsafe" in sub.stdout, (sub.stdout, sub.stderr)


@pytest.mark.parametrize("command", ["summary", "stats"])
def test_a_hub_repository_pushed_to_between_two_shards(tmp_path, command):
    """hf://org/m reads each file at `main` through the Hub's resolve route, whose redirect names the commit then at the
    branch's head (X-Repo-Commit). A push landing between two shards' reads (a training job uploading every N steps:
    the new shard the old one's size) had `stats` sum shard 1 of one version and shard 2 of the next, exit 0: `b`'s
    mean 2.0, in neither version (safetensors' own load of each). Now the second commit is refused, one line."""
    from safetensors.torch import load_file, save_file

    repo = tmp_path / "repo"
    repo.mkdir()
    names = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    save_file({"a": torch.ones(1000)}, str(repo / names[0]))
    save_file({"b": torch.ones(1000)}, str(repo / names[1]))
    save_file({"b": torch.full((1000,), 2.0)}, str(repo / "pushed.safetensors"))   # the next version's shard 2
    assert os.path.getsize(repo / "pushed.safetensors") == os.path.getsize(repo / names[1])
    assert not torch.equal(load_file(str(repo / "pushed.safetensors"))["b"], load_file(str(repo / names[1]))["b"])
    (repo / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": dict(zip("ab", names))}))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    with Server(str(repo), hub={"org/m": str(repo)}, commits={names[1]: "1" * 40},
                swap={f"/cdn/org/m/main/{names[1]}": (0, "pushed.safetensors")}) as s:
        p = subprocess.run([sys.executable, "-m", "ckptstat", command, "hf://org/m"], capture_output=True, text=True,
                           timeout=120, env={**env, "HF_ENDPOINT": s.url})
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    assert "the repository changed while it was read" in p.stderr and names[1] in p.stderr


def test_an_s3_object_overwritten_between_its_header_and_its_values(tmp_path):
    """A training run saving to one key (s3://runs/model.safetensors) while ckptstat reads it: the header and the first
    window came from one version, the values from the next (fs.cat_file reads whatever the key holds now): the tensor
    read held both versions' values (mean 2.92 of a tensor of ones, then of threes). Now each range is read through
    s3fs's file, If-Match the ETag it opened: one line, the file changed while it was read."""
    pytest.importorskip("moto.server")
    from safetensors.torch import load_file, save_file

    from ckptstat import sources
    from ckptstat.errors import CheckpointError
    from ckptstat.formats.registry import open_checkpoint

    v1, v2 = tmp_path / "v1.safetensors", tmp_path / "v2.safetensors"
    save_file({"w": torch.ones(400_000)}, str(v1))
    save_file({"w": torch.full((400_000,), 3.0)}, str(v2))
    assert os.path.getsize(v1) == os.path.getsize(v2)
    sources.reset()
    with moto_s3("runs", {"model.safetensors": str(v1)}) as client:
        ckpt = open_checkpoint("s3://runs/model.safetensors")   # the header, and the first window's values
        assert list(ckpt.tensors) == list(load_file(str(v1)))
        client.upload_file(str(v2), "runs", "model.safetensors")   # the run's next save
        with pytest.raises(CheckpointError, match="the file changed while it was read"):
            ckpt.read("w")
        sources.reset()
        assert (open_checkpoint("s3://runs/model.safetensors").read("w") == load_file(str(v2))["w"].numpy()).all()
    sources.reset()
