"""`ckptstat scan` side by side with picklescan, modelscan and modelaudit (issue 31): which files that really
run code each one flags, which benign real saves it flags, its errors and its wall time.

The corpus (built into --corpus, or reused with --reuse):
  hostile : fixtures/make_scan_corpus.py's differential corpus (each payload writes `<case>.marker`), the fifth
            red-team pass's polyglots (tests/polyglots.py: two central directories read as .npz / .keras, the
            msgpack map that is BINBYTES8, a pickle whose 4 KiB head is one opcode, a zip claiming version 6.4),
            a Hugging Face cache snapshot linking to a hostile pytorch_model.bin blob, a plain pickle and numpy
            object arrays whose element's __reduce__ runs the payload, and plain data's look-alikes (a training
            checkpoint reaching pathlib's write_text through getattr or by its qualified name).
  benign  : real saves: make_scan_corpus's torch.save controls, a whole nn.Module pickled by torch.save (class
            imports, no payload), transformers save_pretrained .bin (fixtures/torch), numpy .npy/.npz with and
            without object arrays of plain data, training checkpoints with plain data (fixtures/torch/training-data*:
            an args Namespace, numpy scalars, an omegaconf config), a Trainer's training_args.bin, Keras 3 .keras and
            .weights.h5, a Keras 2 .h5, safetensors, a Flax msgpack, an HF cache snapshot of benign blobs, and a
            Lightning 1.4 checkpoint keyed by its ModelCheckpoint class (Stable Diffusion 1.x's .ckpt layout).
Ground truth is what the loaders do, not any scanner's verdict: torch.load(weights_only=False),
np.load(allow_pickle=True) (every member of an .npz) and pickle.load, each over every file in a throw-away
subprocess (cwd: the corpus; RLIMIT_AS 4 GiB, RLIMIT_CPU 300 s; not a real sandbox: the payloads only create
their marker). A file "executes" when a marker appeared.

Each tool is run as a user runs it, its CLI in a subprocess, on every file (--jobs at a time) and once on the
corpus folder; verdicts come from exit codes (and, for the folder runs, from the files named in the output).
The peers live in their own venv (--peers, default /tmp/peers/bin: `python3 -m venv /tmp/peers &&
/tmp/peers/bin/pip install picklescan modelscan modelaudit`), never in ckptstat's.

Run: `python bench/scan_peers.py [--jobs 2] [--out bench/results/scan_peers.md]` (a few minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import pathlib
import pickle
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MARK = ".marker"
LOADERS = {
    "torch.load": "import torch\ntorch.load(p, weights_only=False)",
    "np.load": "import numpy as np\nz = np.load(p, allow_pickle=True)\n"
               "[z[k] for k in z.files] if isinstance(z, np.lib.npyio.NpzFile) else None",
    "pickle.load": "import pickle\npickle.load(open(p, 'rb'))",
}
# One loader over many files; prints each index once done, so a crash resumes after the file that killed it.
LOAD_ALL = """
import sys, warnings
warnings.simplefilter("ignore")
src = sys.stdin.read()
for i, p in enumerate(sys.argv[1:]):
    try:
        exec(src, {"p": p})
    except BaseException:
        pass
    print(i, flush=True)
"""


class _Call:
    """Pickles as `fn(*args)` (REDUCE); callable, so it can be another REDUCE's function."""

    def __init__(self, fn: object, *args: object):
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.fn, self.args

    def __call__(self, *args: object) -> None:   # (pickle asks that a REDUCE's function be callable; never called)
        raise AssertionError


def _fixture_module(name: str):  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "fixtures" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _lightning_1x_checkpoint() -> bytes:
    """What Lightning 1.4's dump_checkpoint writes (sd-v1-4.ckpt's layout): `callbacks` keyed by ModelCheckpoint, the
    class pickled by its real name from a stand-in (Lightning 1.x needs an old torch; no loader here imports it)."""
    import types

    import torch
    module = "pytorch_lightning.callbacks.model_checkpoint"
    saved = {m: sys.modules.get(m) for m in ("pytorch_lightning", "pytorch_lightning.callbacks", module)}
    cls = type("ModelCheckpoint", (), {"__module__": module})
    for m in saved:
        sys.modules[m] = types.ModuleType(m)
    sys.modules[module].ModelCheckpoint = cls   # type: ignore[attr-defined]
    try:
        buf = io.BytesIO()
        torch.save({"epoch": 6, "global_step": 470000, "pytorch-lightning_version": "1.4.2",
                    "state_dict": {"model.w": torch.ones(2, 2)},
                    "callbacks": {cls: {"best_model_score": torch.tensor(0.25), "best_model_path": "epoch=6.ckpt"}}},
                   buf)
        return buf.getvalue()
    finally:
        for m, was in saved.items():
            sys.modules.pop(m) if was is None else sys.modules.__setitem__(m, was)


def build(folder: Path) -> dict[str, str]:
    """Writes the corpus; returns case (path relative to `folder`) -> what it is (hostile cases' claims are
    only descriptions: ground_truth decides)."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from hf_cache import REV, hf_repo
    from polyglots import flax_pickle, torch_bytes, truncated_head_pickle, two_directory_zip, zip_version_64

    folder.mkdir(parents=True, exist_ok=True)
    corpus = _fixture_module("make_scan_corpus")
    cases = {name: ("hostile: " if bad else "benign: ") + "make_scan_corpus"
             for name, bad in corpus.write_corpus(str(folder)).items()}

    def marker(name: str) -> str:
        """The marker a payload creates: named after its case, '/' as '__' (unique in the corpus' top folder)."""
        return str(folder / (name.replace("/", "__") + MARK))

    def evil(name: str) -> object:
        """An object whose unpickling creates `name`'s marker (make_scan_corpus's payload: exec of open())."""
        return corpus._Payload(f"open({marker(name)!r}, 'w').close()")

    def put(name: str, data: bytes, what: str) -> None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        cases[name] = what

    put("two.npz", two_directory_zip(marker("two.npz"), "npz"), "hostile: two central directories, .npz for zipfile")
    put("two.keras", two_directory_zip(marker("two.keras"), "keras"), "hostile: two central directories, Keras for zipfile")
    put("flax_model.msgpack", flax_pickle(marker("flax_model.msgpack")), "hostile: msgpack map that is BINBYTES8")
    put("model_best.pth.tar", truncated_head_pickle(marker("model_best.pth.tar")), "hostile: 4 KiB head is one opcode")
    put("checkpoint_last", zip_version_64(marker("checkpoint_last")), "hostile: zip claiming version 6.4")
    link = f"hub/models--evil--repo/snapshots/{REV}/pytorch_model.bin"
    snap = hf_repo(folder / "hub", {"pytorch_model.bin": torch_bytes({"w": torch.ones(2), "x": evil(link)}),
                                    "config.json": b"{}"}, "models--evil--repo")
    assert str((snap / "pytorch_model.bin").relative_to(folder)) == link
    cases[link] = "hostile: HF cache snapshot -> blob (torch.save)"
    put("evil-plain.pkl", pickle.dumps({"w": [1.0], "x": evil("evil-plain.pkl")}),
        "hostile: pickle.dumps of a __reduce__ payload")
    buf = io.BytesIO()
    np.save(buf, np.array([evil("evil-object.npy")], dtype=object))
    put("evil-object.npy", buf.getvalue(), "hostile: np.save of an object array")
    buf = io.BytesIO()
    np.savez(buf, w=np.ones(3), x=np.array([evil("evil-object.npz")], dtype=object))
    put("evil-object.npz", buf.getvalue(), "hostile: np.savez with an object array")

    # Plain data's look-alikes: a training checkpoint whose only globals beside its Namespace are pathlib's and
    # getattr (a plain class's method reached), or the method named by its qualified name (protocol 4)
    for name, payload in [("evil-getattr-path.pt", lambda m: _Call(_Call(getattr, pathlib.PosixPath, "write_text"),
                                                                    pathlib.PosixPath(m), "")),
                          ("evil-qualname-path.pt", lambda m: _Call(pathlib.PosixPath.write_text, pathlib.PosixPath(m),
                                                                     ""))]:
        buf = io.BytesIO()
        torch.save({"args": argparse.Namespace(lr=0.1), "w": torch.ones(2), "x": payload(marker(name))}, buf,
                   pickle_protocol=4)
        put(name, buf.getvalue(), "hostile: plain data's look-alike (pathlib's write_text reached)")

    # Benign real saves.
    import transformers
    buf = io.BytesIO()
    torch.save(transformers.TrainingArguments(output_dir=str(folder / "out"), report_to=[]), buf)
    put("checkpoint-1/training_args.bin", buf.getvalue(), "benign: a transformers Trainer's training_args.bin")
    put("sd-v1-style.ckpt", _lightning_1x_checkpoint(), "benign: Lightning 1.4's layout (Stable Diffusion 1.x .ckpt): "
        "callbacks keyed by the ModelCheckpoint class")
    buf = io.BytesIO()
    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), buf)
    put("benign-whole-module.pt", buf.getvalue(), "benign: torch.save of a whole nn.Module (class imports)")
    for name, value in [("benign-plain.npy", np.arange(6, dtype=np.float32).reshape(2, 3)),
                        ("benign-object.npy", np.array([{"lr": 1e-3, "steps": [1, 2]}, "text", None], dtype=object))]:
        buf = io.BytesIO()
        np.save(buf, value)
        put(name, buf.getvalue(), "benign: np.save" + (" of plain-data objects" if value.dtype == object else ""))
    buf = io.BytesIO()
    np.savez(buf, a=np.ones((2, 2)), b=np.arange(3))
    put("benign-plain.npz", buf.getvalue(), "benign: np.savez")
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.ones(4), meta=np.array([{"epoch": 3}, ["a", 1]], dtype=object))
    put("benign-object.npz", buf.getvalue(), "benign: np.savez_compressed with plain-data objects")
    for src, what in [("torch/bert-mlm/pytorch_model.bin", "transformers save_pretrained, torch zip"),
                      ("torch/bert-mlm-legacy/pytorch_model.bin", "transformers save_pretrained, legacy torch"),
                      ("torch/train.pt", "torch.save of a training checkpoint"),
                      ("torch/training-data.pt", "a training checkpoint with plain data (args Namespace, numpy "
                                                 "scalar, omegaconf config, numpy RNG state)"),
                      ("torch/training-data-legacy.pt", "the same, legacy torch.save"),
                      ("trl/training_args.bin", "a TRL SFTConfig's training_args.bin (trl 1.16.0)"),
                      ("keras3-zip/mlp.keras", "Keras 3 .keras"), ("keras3-zip/mlp-deflated.keras", "Keras 3 .keras"),
                      ("keras-corpus/k3-bn.keras", "Keras 3 .keras"), ("keras3/model.weights.h5", "Keras 3 .weights.h5"),
                      ("keras-corpus/k2-bn.h5", "Keras 2 .h5"), ("bert-tiny/model.safetensors", "safetensors"),
                      ("flax/bert-mlm/flax_model.msgpack", "Flax msgpack"), ("numpy/embedding.npy", "numpy .npy")]:
        put("fixtures/" + src, (ROOT / "fixtures" / src).read_bytes(), f"benign: {what} (fixtures/{src})")
    shard = ROOT / "fixtures/torch/bert-mlm-sharded"
    for f in sorted(shard.glob("*.bin")):
        put(f"fixtures/bert-mlm-sharded/{f.name}", f.read_bytes(), "benign: transformers save_pretrained shard")
    snap = hf_repo(folder / "hub", {"pytorch_model.bin": (ROOT / "fixtures/torch/bert-mlm/pytorch_model.bin").read_bytes(),
                                    "model.safetensors": (ROOT / "fixtures/bert-tiny/model.safetensors").read_bytes(),
                                    "config.json": b"{}"}, "models--benign--repo")
    for name in ("pytorch_model.bin", "model.safetensors"):
        cases[str((snap / name).relative_to(folder))] = "benign: HF cache snapshot -> blob"
    return cases


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (300, 300))


def _markers(folder: Path) -> set[str]:
    return {p.name[: -len(MARK)].replace("__", "/") for p in folder.glob("*" + MARK)}


def _clear_markers(folder: Path) -> None:
    for p in folder.glob("*" + MARK):
        shutil.rmtree(p) if p.is_dir() else p.unlink()   # os.mkdir payloads make folders


def ground_truth(folder: Path, cases: dict[str, str]) -> dict[str, list[str]]:
    """case -> the loaders whose run of it created its marker."""
    ran: dict[str, list[str]] = {c: [] for c in cases}
    names = sorted(cases)
    for loader, src in LOADERS.items():
        _clear_markers(folder)
        todo = names
        while todo:
            proc = subprocess.run([sys.executable, "-c", LOAD_ALL, *todo], input=src, capture_output=True, text=True,
                                  cwd=folder, preexec_fn=_limits, timeout=600, env={**os.environ, "HOME": str(folder)})
            done = [int(x) for x in proc.stdout.split()]
            todo = todo[(done[-1] + 2 if done else 1):] if proc.returncode else []   # skip the file that killed it
        for name in _markers(folder):
            ran.setdefault(name, []).append(loader)   # (a marker no case names fails the report loudly)
    _clear_markers(folder)
    return ran


# ---------------------------------------------------------------------------------------------
# The tools, as a user runs them. Each verdict reads the exit code (and stdout: JSON where the tool writes it;
# stderr holds their logging).

Run = tuple[int, str, str, float]   # exit code, stdout, stderr, wall seconds


def tools(peers: Path) -> dict[str, dict]:
    py = [sys.executable, "-m", "ckptstat", "scan"]
    audit = [str(peers / "modelaudit"), "scan", "--no-cache", "--format", "json"]
    env = {**os.environ, "PROMPTFOO_DISABLE_TELEMETRY": "1", "NO_ANALYTICS": "1"}   # modelaudit phones home otherwise
    return {
        "ckptstat scan": {"file": lambda p: py + [p], "folder": lambda d: py + [d, "--json"], "flag_rc": (1,),
                          "ok_rc": (0, 1), "parse": _parse_ckptstat, "cwd": str(ROOT), "env": None},
        "picklescan": {"file": lambda p: [str(peers / "picklescan"), "-p", p], "flag_rc": (1,), "ok_rc": (0, 1),
                       "folder": lambda d: [str(peers / "picklescan"), "-p", d], "parse": _parse_picklescan},
        # 3: "no supported files" (not scanned: not flagged, not an error)
        # its JSON goes to a file: on stdout rich wraps it at the terminal's width
        "modelscan": {"file": lambda p: [str(peers / "modelscan"), "-p", p], "flag_rc": (1,), "ok_rc": (0, 1, 3),
                      "folder": lambda d: [str(peers / "modelscan"), "-p", d, "-r", "json", "-o", d + ".modelscan.json"],
                      "report_file": ".modelscan.json", "parse": _parse_modelscan},
        "modelaudit": {"file": lambda p: audit + [p], "folder": lambda d: audit + [d], "flag_rc": (1,), "ok_rc": (0, 1),
                       "batch": lambda ps: audit + ps, "parse": _parse_modelaudit, "env": env},
        # the same runs, counting only CRITICAL issues: its exit code is 1 for the warning every torch.save gets
        "modelaudit, critical only": {"same_as": "modelaudit", "parse": _parse_modelaudit_critical},
    }


def _json(out: str) -> dict:
    """The JSON object a tool printed (after any progress lines)."""
    at = 0 if out.startswith("{") else out.find("\n{") + 1
    try:
        return json.JSONDecoder().raw_decode(out[at:])[0] if out[at:at + 1] == "{" else {}
    except ValueError:
        return {}


def _rel(path: str, folder: str) -> str:
    """A location a tool printed ('/corpus/x.pt:archive/data.pkl') as the file relative to the corpus."""
    return path.removeprefix(folder.rstrip("/") + "/").split(":")[0].split(" (pos ")[0]


def _parse_ckptstat(out: str, folder: str) -> tuple[set[str], set[str]]:
    files = _json(out).get("files", [])
    return ({f["path"] for f in files if f["status"] in ("unsafe", "unknown")},
            {f["path"] for f in files if f["status"] == "unreadable"})


def _parse_picklescan(out: str, folder: str) -> tuple[set[str], set[str]]:
    flagged = {_rel(line.split(": dangerous import")[0], folder) for line in out.splitlines() if ": dangerous import" in line}
    return flagged, set()


def _parse_modelscan(out: str, folder: str) -> tuple[set[str], set[str]]:
    d = _json(out)
    return ({_rel(i["source"], folder) for i in d.get("issues", [])},
            {_rel(e.get("source") or "", folder) for e in d.get("errors", [])} - {""})


def _parse_modelaudit(out: str, folder: str, levels: tuple[str, ...] = ("warning", "critical")) -> tuple[set[str], set[str]]:
    """Files with an issue of those levels (warning or critical: what makes its exit code 1)."""
    return {_rel(i.get("location") or "", folder) for i in _json(out).get("issues", [])
            if i.get("severity") in levels} - {""}, set()


def _parse_modelaudit_critical(out: str, folder: str) -> tuple[set[str], set[str]]:
    return _parse_modelaudit(out, folder, ("critical",))


def _run(cmd: list[str], cwd: str | None = None, env: dict | None = None) -> Run:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -9, "", "timed out after 900 s"
    return rc, out, err, time.perf_counter() - t0


def evaluate(folder: Path, cases: dict[str, str], peers: Path, jobs: int, batch: bool) -> dict[str, dict]:
    """tool -> per-file verdicts and wall time, and the folder run's."""
    alias = {os.path.relpath(os.path.realpath(folder / c), folder): c for c in cases}   # HF blobs -> their link
    names = [Path(c).name for c in cases]
    alias.update({Path(c).name: c for c in cases if names.count(Path(c).name) == 1})

    def case(printed: str) -> str:
        """The case a tool's printed location names (modelaudit prints some as /proc/self/fd/N/<name>)."""
        return printed if printed in cases else alias.get(printed, alias.get(Path(printed).name, printed))
    results: dict[str, dict] = {}
    table = tools(peers)
    for name, t in table.items():
        base = table.get(t.get("same_as", ""), t)
        cwd, env = base.get("cwd"), base.get("env")
        if "same_as" in t:   # another reading of the same runs
            r = {k: v for k, v in results[t["same_as"]].items() if k in ("mode", "wall", "runs", "batch_out", "folder_rc",
                                                                          "folder_wall", "folder_out", "errors")}
            r["derived"] = True
        elif batch and "batch" in t:   # one process over every file: its start-up of seconds, 84 times, is minutes
            rc, out, err, wall = _run(t["batch"]([str(folder / c) for c in cases]), cwd, env)
            r = {"mode": "one run naming every file", "wall": wall, "batch_out": out, "errors": set()}
        else:
            with ThreadPoolExecutor(jobs) as pool:
                runs = dict(zip(cases, pool.map(lambda c, t=t, w=cwd, e=env: _run(t["file"](str(folder / c)), w, e), cases)))
            r = {"mode": "per file", "wall": sum(x[3] for x in runs.values()), "runs": runs,
                 "errors": {c for c, x in runs.items() if x[0] not in t["ok_rc"]}}
        if "batch_out" in r:
            r["flagged"] = {case(p) for p in t["parse"](r["batch_out"], str(folder))[0]}
        elif "same_as" in t:
            r["flagged"] = {c for c, x in r["runs"].items() if t["parse"](x[1], str(folder))[0]}
        else:
            r["flagged"] = {c for c, x in r["runs"].items() if x[0] in t["flag_rc"]}
        if "folder_out" not in r:
            rc, out, err, wall = _run(t["folder"](str(folder)), cwd, env)
            if "report_file" in t and os.path.exists(str(folder) + t["report_file"]):
                out = Path(str(folder) + t["report_file"]).read_text()
            r.update(folder_rc=rc, folder_wall=wall, folder_out=out)
        f_flagged, f_errors = t["parse"](r["folder_out"], str(folder))
        r.update(folder_flagged={case(p) for p in f_flagged}, folder_errors={case(p) for p in f_errors})
        results[name] = r
        print(f"{name}: {len(r['flagged'])} flagged, {len(r['errors'])} errors, {r['wall']:.0f} s", file=sys.stderr)
    return results


def versions(peers: Path) -> dict[str, str]:
    import ckptstat

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = {"ckptstat scan": f"{ckptstat.__version__} (git {rev})"}
    probe = "import importlib.metadata as m, sys; print(' '.join(m.version(n) for n in sys.argv[1:]))"
    names = ["picklescan", "modelscan", "modelaudit"]
    got = subprocess.run([str(peers / "python"), "-c", probe, *names], capture_output=True, text=True).stdout.split()
    out.update(zip(names, got))
    import numpy
    import torch
    out["oracles"] = f"torch {torch.__version__}, numpy {numpy.__version__}, Python {platform.python_version()}"
    return out


def report(cases: dict[str, str], ran: dict[str, list[str]], results: dict[str, dict], vers: dict[str, str],
           seconds: float) -> str:
    executing = sorted(c for c in cases if ran[c])
    benign = sorted(c for c in cases if cases[c].startswith("benign"))
    inert = sorted(c for c in cases if not ran[c] and not cases[c].startswith("benign"))
    lines = ["# `ckptstat scan` vs picklescan, modelscan, modelaudit", "",
             f"Written by `python bench/scan_peers.py` on {datetime.date.today()} "
             f"({platform.machine()}, {os.cpu_count()} CPUs visible, shared with other jobs; Linux {platform.release()}); "
             f"whole run {seconds:.0f} s.", "",
             "Versions: " + "; ".join(f"{k} {v}" for k, v in vers.items()) + ".", "",
             f"Corpus: {len(cases)} files. **{len(executing)} execute** a payload under a real loader "
             f"(ground truth: torch.load(weights_only=False), np.load(allow_pickle=True), pickle.load, each in a "
             f"throw-away subprocess; a file executes when its marker appeared), {len(benign)} are benign real saves, "
             f"{len(inert)} are hostile-looking files no loader runs (torch stops first: a wrong magic number, a tar "
             f"without `storages`...; neither a catch nor a false alarm whatever a tool says).", "",
             "Per file: each tool's CLI on each file, its exit code as the verdict (ckptstat: 1 unsafe or unknown, "
             "2 unreadable; picklescan: 1 dangerous; modelscan: 1 issues, 3 no supported file), except modelaudit, run "
             "once naming every file (its start-up is seconds: ~10 s a file here; `--modelaudit-per-file` runs it per "
             "file), whose verdict per file is a warning or critical issue at that file (what makes its exit code 1; "
             "`modelaudit, critical only`: a critical one). "
             "Folder: one run on the corpus folder; a file counts as flagged when the output names it (its member, or "
             "the HF blob its snapshot link points to). Wall: sum of the per-file runs (each a whole process), and the "
             "folder run.", "",
             "| tool | executing caught | missed | benign flagged | errors | wall (sum of runs) "
             "| folder: caught | folder: benign flagged | folder exit | folder wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        caught = [c for c in executing if c in r["flagged"]]
        lines.append(f"| {name} | {len(caught)}/{len(executing)} | {len(executing) - len(caught)} "
                     f"| {len([c for c in benign if c in r['flagged']])}/{len(benign)} | {len(r['errors'])} "
                     f"| {r['wall']:.1f} s | {len([c for c in executing if c in r['folder_flagged']])}/{len(executing)} "
                     f"| {len([c for c in benign if c in r['folder_flagged']])}/{len(benign)} | {r['folder_rc']} "
                     f"| {r['folder_wall']:.1f} s |")
    lines += ["", "## Misses (executing files a tool did not flag, per file)", ""]
    for name, r in results.items():
        missed = [c for c in executing if c not in r["flagged"]]
        lines.append(f"- **{name}** ({len(missed)}): " + (", ".join(
            f"`{c}`{' (error)' if c in r['errors'] else ''}" for c in missed) or "none"))
    lines += ["", "Folder runs, executing files not named in the output:", ""]
    for name, r in results.items():
        missed = [c for c in executing if c not in r["folder_flagged"]]
        lines.append(f"- **{name}** ({len(missed)}): " + (", ".join(f"`{c}`" for c in missed) or "none"))
    lines += ["", "## False alarms (benign real saves flagged, per file)", ""]
    for name, r in results.items():
        alarms = [c for c in benign if c in r["flagged"]]
        lines.append(f"- **{name}** ({len(alarms)}): " + (", ".join(f"`{c}`" for c in alarms) or "none"))
    lines += ["", "## Hostile-looking files no loader runs (flagged per file; neither a catch nor a false alarm)", ""]
    for name, r in results.items():
        lines.append(f"- **{name}**: " + (", ".join(f"`{c}`" for c in inert if c in r["flagged"]) or "none flagged"))
    lines += ["", "## Errors (per file: the tool's exit code said it could not scan)", ""]
    for name, r in results.items():
        if r["errors"] and not r.get("derived"):
            lines.append(f"- **{name}**: " + ", ".join(f"`{c}`" for c in sorted(r["errors"])))
    lines += ["", "ckptstat's exit 2 on a safetensors or Flax file is its documented \"no pickle to scan\" (a folder "
              "scan lists them as safe); on `evil-tar.pt` and `evil-zip-outside-folder.pt`, that torch.load raises before "
              "unpickling anything (the line names the pickle it never reaches).", "",
              "`benign-whole-module.pt` (torch.save of a whole `nn.Module`) runs no payload, but torch.load "
              "imports and calls classes outside torch's weights_only allowlist to rebuild it, and "
              "torch.load(weights_only=True), the default since torch 2.6, refuses it: ckptstat calls that UNSAFE by "
              "design (docs/security.md), so it counts here as a false alarm.", "",
              "## The corpus", "", "| file | what | executes under |", "|---|---|---|"]
    for c in sorted(cases):
        lines.append(f"| `{c}` | {cases[c].split(': ', 1)[1]} ({cases[c].split(':')[0]}) | {', '.join(ran[c]) or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default="/tmp/peers/bin", help="bin folder of the venv holding the peers")
    ap.add_argument("--corpus", default=None, help="build the corpus here (default: a temp folder)")
    ap.add_argument("--jobs", type=int, default=2, help="per-file runs at a time")
    ap.add_argument("--out", default=None, help="write the markdown results file")
    ap.add_argument("--json", default=None, help="write the verdicts as JSON")
    ap.add_argument("--modelaudit-per-file", action="store_true",
                    help="run modelaudit once per file (~10 s each here) instead of once naming every file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    peers = Path(args.peers)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.corpus or os.path.join(tmp, "corpus")).resolve()
        if folder.exists():
            shutil.rmtree(folder)
        cases = build(folder)
        ran = ground_truth(folder, cases)
        print(f"{len(cases)} files, {sum(bool(v) for v in ran.values())} execute", file=sys.stderr)
        results = evaluate(folder, cases, peers, args.jobs, not args.modelaudit_per_file)
        text = report(cases, ran, results, versions(peers), time.perf_counter() - t0)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cases": cases, "ran": ran, "results": {n: {
                    "mode": r["mode"], "wall_s": r["wall"], "flagged": sorted(r["flagged"]), "errors": sorted(r["errors"]),
                    "rc": {c: x[0] for c, x in r.get("runs", {}).items()}, "folder_rc": r["folder_rc"],
                    "folder_flagged": sorted(r["folder_flagged"]), "folder_output": r["folder_out"][-50_000:]}
                    for n, r in results.items()}}, f, indent=1)
    emit(text, args.out)


if __name__ == "__main__":
    main()
