"""`ckptstat audit` (issue 23) on a generated zoo (fixtures/make_zoo.py: ~60 checkpoints in mixed
formats written by their real writers, some hostile, some with broken ties): each record against the
writers' oracle, the same records from a local pool as from the serial run (timing fields aside), a pool
process killed mid-run losing no record, resuming, Parquet. A real Dask cluster (`--scheduler`) is
tests/test_dask_cluster.py's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ckptstat.analysis.audit import audit_record, run_pool, run_serial, strip_timing, summarize_records
from ckptstat.analysis.audit.find import Unit, discover
from ckptstat.analysis.summary import summarize
from ckptstat.cli import main
from ckptstat.formats.registry import open_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
from conftest import fixture_script  # noqa: E402

_make_zoo = fixture_script("make_zoo")
build_zoo = _make_zoo.build_zoo

FIXTURES = os.path.join(HERE, "..", "fixtures")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("zoo"))
    return root, build_zoo(root)


@pytest.fixture(scope="module")
def serial(zoo):
    units, _ = discover(zoo[0])
    return units, {r["path"]: r for r in run_serial(units)}


def _bare(records):
    return {p: strip_timing(r) for p, r in records.items()}


def test_zoo_is_big_and_mixed(zoo, serial):
    _, manifest = zoo
    units, records = serial
    assert len(manifest) >= 50
    assert set(records) == set(manifest)   # every checkpoint found once: shards, data files, configs claimed
    formats = {(r["format"] or "").split(" ")[0] for r in records.values()}
    assert {"safetensors", "pytorch", "gguf", "onnx", "numpy", "keras-h5", "keras", "tf-bundle"} <= formats


def test_records_match_the_writers(zoo, serial):
    _, manifest = zoo
    _, records = serial
    for path, expect in manifest.items():
        r = records[path]
        assert set(r) >= {"path", "format", "bytes", "parameters", "dtypes", "buckets", "ties", "scan", "config",
                          "error", "seconds", "worker"}
        if "params" in expect:
            assert r["parameters"] == expect["params"], path
        assert bool(r["error"]) == bool(expect.get("error")), (path, r["error"])
        if "unsafe" in expect:
            assert r["scan"]["verdict"] == ("unsafe" if expect["unsafe"] else "safe"), path
        if "ties" in expect:
            assert r["ties"]["verdict"] == expect["ties"], path
        if "config" in expect:
            assert r["config"]["verdict"] == expect["config"], path
        if not r["error"]:
            assert r["bytes"] == sum(os.path.getsize(os.path.join(os.path.dirname(path), f)) for f in r["files"])


def test_hostile_files_are_error_records(zoo, serial):
    _, records = serial
    hostile = {p: r for p, r in records.items() if "/hostile/" in p and not p.endswith("benign-zip.pt")}
    assert len(hostile) >= 10
    assert all(r["error"] and "\n" not in r["error"] for r in hostile.values())


def test_summary_counts(serial):
    _, records = serial
    s = summarize_records(list(records.values()))
    assert s["records"] == len(records)
    assert sum(s["scan"].values()) == len(records)
    assert len(s["broken_ties"]) == 2 and len(s["unsafe"]) == 5
    assert {d["path"].split(os.sep)[-2] for d in s["largest_discrepancies"]} == {"bert-config-drift", "llama-no-head"}


def test_unknown_scan_fails_the_audit_as_scan_does(tmp_path, capsys):
    # a TorchScript archive: torch.load hands it to torch.jit.load, which runs its code; scan says unknown
    torch = pytest.importorskip("torch")
    torch.jit.script(torch.nn.Linear(2, 3)).save(str(tmp_path / "model.pt"))
    assert main(["scan", str(tmp_path / "model.pt")]) == 1
    capsys.readouterr()
    rc = main(["audit", str(tmp_path), "--out", str(tmp_path.parent / "ts.jsonl"), "--json", "--no-progress"])
    s = json.loads(capsys.readouterr().out)
    assert rc == 1 and s["unknown"] == [str(tmp_path / "model.pt")] and s["scan"] == {"unknown": 1}
    assert summarize_records([{"path": "a", "scan": {"verdict": "unknown"}}])["unknown"] == ["a"]


def test_pool_equals_serial(serial):
    units, records = serial
    pooled = {r["path"]: r for r in run_pool(units, 2)}
    assert _bare(pooled) == _bare(records)
    assert {r["worker"] for r in pooled.values()} != {"local"}


@pytest.mark.parametrize("name,verdict", [("gpt2-duplicated-tie", "unchecked"), ("gpt2-broken-tie", "broken")])
def test_headers_only_leaves_ties_unchecked(serial, name, verdict):
    """--headers-only compares no tie stored twice whole: equal copies stay `unchecked`; copies that differ are found
    `broken` from the few reads the census makes to count them as transformers 5.25 does (docs/ties.md)."""
    units, records = serial
    unit = next(u for u in units if u.path.endswith(os.path.join(name, "model.safetensors")))
    r = audit_record(unit, values=False)
    assert r["ties"]["verdict"] == verdict
    assert strip_timing({**r, "ties": None}) == strip_timing({**records[unit.path], "ties": None})


def test_missing_entry_is_a_record(tmp_path):
    r = audit_record(Unit(str(tmp_path / "gone.safetensors"), (), 0, 0))
    assert "no such file" in r["error"]


@pytest.mark.parametrize("name", ["model.safetensors", "flax_model.msgpack", "model.gguf", "model.onnx", "x.npy",
                                  "model.pdparams", "w.pt", "model.keras"])
def test_an_empty_checkpoint_is_a_unit(tmp_path, capsys, name):
    """A failed download (an empty `model.safetensors` beside its config.json) was passed over in silence: audit
    said 0 records, exit 0, while `ckptstat summary` of it says the file is empty. A file named as a format's files
    are that is empty is a unit whose record says so; an empty README is none."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / name).write_bytes(b"")
    (folder / "config.json").write_text("{}")
    (folder / "README.md").write_bytes(b"")
    rc = main(["audit", str(tmp_path), "--out", str(tmp_path / "r.jsonl"), "--no-progress"])
    capsys.readouterr()
    (rec,) = map(json.loads, open(tmp_path / "r.jsonl"))
    assert rc == 1 and rec["path"].endswith(name) and "file is empty" in rec["error"]


def test_dcp_folders_are_one_unit_each():
    """Each torch.distributed.checkpoint folder (global, rank-local and safetensors metadata; HuggingFaceStorageWriter
    shards) is one unit claiming every file torch wrote there: a rank's `.distcp` or shard alone was its own failed
    record ("one rank's file ... open the folder"), and a rank-local folder was audited twice."""
    root = os.path.join(FIXTURES, "dcp")
    units, skipped = discover(root)
    folders = sorted(os.listdir(root))
    assert sorted(os.path.basename(os.path.dirname(u.path) if u.path.endswith("/.metadata") else u.path)
                  for u in units) == folders and not skipped
    for u in units:
        folder = os.path.dirname(u.path) if u.path.endswith("/.metadata") else u.path
        assert sorted(os.path.basename(f) for f in u.files) == sorted(os.listdir(folder)), u.path
        r = audit_record(u)
        assert r["error"] is None and r["format"].startswith("dcp"), r
        assert r["parameters"] == summarize(open_checkpoint(folder))["parameters"]["unique"], u.path


def test_cli_resume_and_parquet(zoo, serial, tmp_path, capsys):
    root, _ = zoo
    _, records = serial
    out = str(tmp_path / "results.jsonl")
    assert main(["audit", root, "--out", out, "--json", "--no-progress"]) == 1   # unsafe files and errors: exit 1
    first = json.loads(capsys.readouterr().out)
    assert first["run"]["audited"] == len(records) and first["run"]["resumed"] == 0
    lines = [json.loads(x) for x in open(out)]
    assert _bare({r["path"]: r for r in lines}) == _bare(records)
    # A run killed mid-write leaves half a line: it is ignored, and the re-run skips all that is done.
    with open(out, "a") as f:
        f.write('{"path": "half')
    touched = os.path.join(root, "numpy", "embedding-0.npy")
    st = os.stat(touched)
    os.utime(touched, ns=(1, 1))   # a changed mtime: audited again
    try:
        assert main(["audit", root, "--out", out, "--json", "--no-progress"]) == 1
    finally:   # the zoo is shared with the other tests
        os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = json.loads(capsys.readouterr().out)
    assert second["run"]["audited"] == 1 and second["run"]["resumed"] == len(records) - 1
    assert second["records"] == len(records)
    pytest.importorskip("pyarrow")
    pq = str(tmp_path / "results.parquet")
    assert main(["audit", root, "--out", pq, "--json", "--no-progress", "--workers", "2"]) == 1
    capsys.readouterr()
    from ckptstat.analysis.audit.store import load

    done = load(pq)
    assert not os.path.exists(pq + ".partial.jsonl")
    assert {k[0] for k in done} == set(records)
    assert main(["audit", root, "--out", pq, "--json", "--no-progress"]) == 1
    assert json.loads(capsys.readouterr().out)["run"]["audited"] == 0


def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(tmp_path):
    """The walk refuses links out of the root, but a cluster's task may wait in the queue long after it: a file replaced
    meanwhile by a link to a checkpoint outside was read as the unit (its bytes the old file's, its parameters the
    outside file's). A unit whose files are not what the walk found is an error record, read no further."""
    root, outside = tmp_path / "zoo", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "model.safetensors").write_bytes(open(os.path.join(FIXTURES, "bert-tiny", "model.safetensors"), "rb").read())
    (outside / "secret.safetensors").write_bytes(open(os.path.join(FIXTURES, "dtypes.safetensors"), "rb").read())
    units, _ = discover(str(root))
    assert audit_record(units[0])["error"] is None
    os.remove(root / "model.safetensors")
    os.symlink(outside / "secret.safetensors", root / "model.safetensors")
    rec = audit_record(units[0])
    assert "changed since the audit found it" in rec["error"] and rec["parameters"] is None and rec["scan"] is None


def test_parquet_keeps_a_name_that_is_no_utf8(tmp_path, capsys):
    """One file named with bytes that are no UTF-8 (Python holds them as surrogate escapes, Parquet's strings cannot)
    made every `--out x.parquet` of the fleet fail ('internal error: UnicodeEncodeError'), run after run. Its bytes go
    in a binary column: pyarrow reads the file's own name back, and a re-run resumes it."""
    pa = pytest.importorskip("pyarrow.parquet")
    root = tmp_path / "zoo"
    root.mkdir()
    weights = open(os.path.join(FIXTURES, "bert-tiny", "model.safetensors"), "rb").read()
    odd = os.path.join(os.fsencode(str(root)), b"w\xff\xfe.safetensors")
    with open(odd, "wb") as f:
        f.write(weights)
    (root / "plain.safetensors").write_bytes(weights)
    pq = str(tmp_path / "r.parquet")
    for audited in (2, 0):
        assert main(["audit", str(root), "--out", pq, "--json", "--no-progress"]) == 0
        assert json.loads(capsys.readouterr().out)["run"]["audited"] == audited
    table = pa.read_table(pq).to_pylist()
    assert sorted(r["path_bytes"] for r in table if r["path_bytes"]) == [odd]
    assert sorted(r["path"] for r in table) == [os.path.join(str(root), "plain.safetensors"),
                                               os.path.join(str(root), "w\\xff\\xfe.safetensors")]


def test_list_file_and_table(zoo, tmp_path, capsys):
    root, _ = zoo
    listing = tmp_path / "list.txt"
    listing.write_text(f"# two good, one gone\n{root}/gguf/model-1.gguf\n{root}/hub/gpt2-st\n{root}/nope.bin\n")
    out = str(tmp_path / "r.jsonl")
    assert main(["audit", f"@{listing}", "--out", out, "--no-progress"]) == 1   # the missing one is an error
    text = capsys.readouterr().out
    assert "3 checkpoints" in text and "no such file" in text
    assert len(open(out).read().splitlines()) == 3


def test_no_dask_without_scheduler(zoo, tmp_path):
    code = ("import sys; from ckptstat.cli import main; main(['audit', sys.argv[1], '--out', sys.argv[2], '--no-progress']);"
            "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, os.path.join(zoo[0], "gguf"), str(tmp_path / "o.jsonl")],
                       capture_output=True, text=True, timeout=300)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stderr


def test_pool_worker_killed_loses_no_record(serial):
    """SIGKILL one pool process mid-run: the units it held are retried alone; nothing is lost or doubled."""
    import multiprocessing.forkserver as fs

    import psutil

    units, records = serial
    got: dict[str, list] = {}
    killed = None
    for i, rec in enumerate(run_pool(units, 2)):
        got.setdefault(rec["path"], []).append(rec)
        if i == 2:
            server = psutil.Process(fs._forkserver._forkserver_pid)   # the pool's processes are its children
            killed = server.children()[0].pid
            os.kill(killed, signal.SIGKILL)
    assert killed is not None
    assert all(len(v) == 1 for v in got.values())
    assert _bare({p: v[0] for p, v in got.items()}) == _bare(records)


def test_stats_scheduler_error_is_one_checkpoint_error(zoo, tmp_path):
    """A worker that cannot read the file (here: truncated after the client opened it) returns the error
    as data, which crosses pickle and is raised on the client as the library's own error naming the file,
    as a one-machine run would (the task run here directly; tests/test_dask_cluster.py runs real clusters)."""
    import pickle
    import shutil

    from ckptstat import open_checkpoint
    from ckptstat.analysis.audit import settings
    from ckptstat.analysis.stats import select
    from ckptstat.analysis.stats.cluster import _stamp, _task, raise_task_error
    from ckptstat.errors import CheckpointError

    path = str(tmp_path / "w.safetensors")
    shutil.copy(os.path.join(zoo[0], "raw", "weights-00-float32.safetensors"), path)
    ckpt = open_checkpoint(path)
    items, _ = select(ckpt, None, (), False)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 16)
    res = pickle.loads(pickle.dumps(_task(path, None, _stamp(ckpt), items, 4096, settings())))
    assert res[0] == "error"
    with pytest.raises(CheckpointError) as err:
        raise_task_error(*res[1:])
    assert path in str(err.value)


def test_limits_reach_the_workers(zoo, serial, tmp_path, capsys):
    """`--limit` is the asking process's: pool workers apply it too (a tiny config cap makes every
    unit with a config.json an error record, in the pool as serially)."""
    units, _ = serial
    hub = [u for u in units if "/hub/" in u.path][:4]
    listing = tmp_path / "l.txt"
    listing.write_text("\n".join(u.path for u in hub))
    for workers in ("1", "2"):
        out = str(tmp_path / f"r{workers}.jsonl")
        assert main(["--limit", "config_bytes=10", "audit", f"@{listing}", "--out", out, "--workers", workers,
                     "--no-progress"]) == 1
        capsys.readouterr()
        recs = [json.loads(x) for x in open(out)]
        assert len(recs) == 4 and all("config" in r["error"] for r in recs), recs
