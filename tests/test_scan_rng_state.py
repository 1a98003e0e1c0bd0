"""`ckptstat scan` of a training loop's saved RNG state, judged by the loader that reads it (analysis/scan/loaders.py
`rng_state`): transformers' Trainer loads `rng_state.pth` (and `rng_state_<rank>.pth`), accelerate's load_state
`random_states_<i>.pkl`, with torch.load(weights_only=True) and numpy's array globals added to the allowlist. The
files are written by the real Trainer and Accelerator; the allowlist is read from the installed libraries; each
verdict is checked against the real loader (torch.load inside transformers' `safe_globals()`, accelerate.utils.load)
and, for hostile variants, against a marker file their payload writes under torch.load(weights_only=False)."""
import importlib
import os
import pickle
import pickletools
import random
import re
import shutil
import warnings
import zipfile
from _compat_pickle import IMPORT_MAPPING

import library_runner
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

from test_scan_differential import LOADER  # noqa: E402 - torch.load(weights_only=False) of each path, in a subprocess
from test_trend import _Data, _tiny  # noqa: E402 - the tiny LLaMA and synthetic data test_trend trains
from torch._weights_only_unpickler import _get_allowed_globals, _get_user_allowed_globals  # noqa: E402
from transformers.trainer_pt_utils import safe_globals  # noqa: E402

from ckptstat.analysis.audit import audit_record  # noqa: E402
from ckptstat.analysis.audit.find import discover  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.loaders import RNG_GLOBALS  # noqa: E402
from ckptstat.errors import CorruptCheckpointError  # noqa: E402

TORCH_ALLOWED = set(_get_allowed_globals())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 1-step Trainer run (its checkpoint-1/) and an Accelerator.save_state folder."""
    root = tmp_path_factory.mktemp("rng")
    args = transformers.TrainingArguments(output_dir=str(root / "run"), max_steps=1, save_steps=1, save_strategy="steps",
                                          per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True)
    transformers.Trainer(model=_tiny(), args=args, train_dataset=_Data()).train()
    accelerate.Accelerator(cpu=True).save_state(str(root / "acc"))
    return root


def _trainer_adds() -> set[str]:
    """The names torch's weights_only unpickler accepts inside transformers' safe_globals() and not outside it."""
    before = set(_get_user_allowed_globals())
    with safe_globals():
        inside = set(_get_user_allowed_globals())
    return inside - before - TORCH_ALLOWED


def _loader(path: str):
    """The library's own load of the file: accelerate's for random_states_*.pkl, else the Trainer's."""
    if os.path.basename(path).startswith("random_states_"):
        return accelerate.utils.load(path)
    with safe_globals():
        return torch.load(path, weights_only=True)


def test_allowlist_is_what_the_libraries_add():
    from accelerate.utils.other import TORCH_SAFE_GLOBALS

    trainer = _trainer_adds()
    assert trainer == {f"{g.__module__}.{g.__qualname__}" for g in TORCH_SAFE_GLOBALS} - TORCH_ALLOWED
    with warnings.catch_warnings():   # numpy 2 keeps numpy.core as a deprecated alias of numpy._core
        warnings.simplefilter("ignore")
        alias = importlib.import_module("numpy.core.multiarray")
    assert alias._reconstruct is np._core.multiarray._reconstruct   # the name numpy 1.x writes: the same function
    assert RNG_GLOBALS == trainer | {"numpy.core.multiarray._reconstruct"}


def test_real_rng_states_scan_safe(run, tmp_path):
    rank = tmp_path / "rng_state_1.pth"   # a distributed run's per-process name
    shutil.copy(run / "run" / "checkpoint-1" / "rng_state.pth", rank)
    for p, who in ((run / "run" / "checkpoint-1" / "rng_state.pth", "transformers' Trainer"), (rank, "transformers' Trainer"),
                   (run / "acc" / "random_states_0.pkl", "accelerate's load_state")):
        with pytest.raises(pickle.UnpicklingError):
            torch.load(p, weights_only=True)   # torch's plain answer: refused
        assert isinstance(_loader(str(p)), dict)   # the library's own loader reads it
        r = scan_path(p)
        assert r["status"] == "safe" and not r["would_run_code"] and r["verdict"].startswith(f"safe: {who} loads it")
        assert r["weights_only_loadable"] is False
        refused = {g["name"] for g in r["globals"] if not g["allowed"]}
        assert refused and refused <= _trainer_adds() and refused == {g["name"] for g in r["globals"]} - TORCH_ALLOWED
    extra = tmp_path / "extra" / "rng_state.pth"   # a pickle torch.load never reaches: named in the verdict still
    extra.parent.mkdir()
    shutil.copy(run / "run" / "checkpoint-1" / "rng_state.pth", extra)
    with zipfile.ZipFile(extra, "a") as z:
        z.writestr("rng_state/extra.pkl", pickle.dumps(_Call(os.system, ("true",)), protocol=2))
    _loader(str(extra))
    dormant = sorted(_pickled_globals(extra, "/extra.pkl") - TORCH_ALLOWED)
    r = scan_path(extra)
    assert r["status"] == "safe" and r["unreached_unsafe_globals"] == dormant and dormant[0] in r["verdict"]
    cut = tmp_path / "cut" / "rng_state.pth"   # cut short: the loader cannot read it, and scan says so (exit 2)
    cut.parent.mkdir()
    data = (run / "run" / "checkpoint-1" / "rng_state.pth").read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises((RuntimeError, OSError)):   # torch's zip reader: a seek past the end
        _loader(str(cut))
    with pytest.raises(CorruptCheckpointError):
        scan_path(cut)


class _Call:
    def __init__(self, f, args):
        self.f, self.args = f, args

    def __reduce__(self):
        return self.f, self.args


PAYLOADS = {   # each writes its marker file when called
    "os.system": lambda m: _Call(os.system, (f"touch {m}",)),
    "builtins.eval": lambda m: _Call(eval, (f"open({m!r}, 'w').close()",)),
    "numpy.save": lambda m: _Call(np.save, (m, 0)),   # a numpy global outside the loaders' list
}
NAMES = ("rng_state.pth", "rng_state_3.pth", "random_states_0.pkl")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """An RNG state as the libraries write it, plus one payload, under each RNG file name; what ran under
    torch.load(weights_only=False) in a subprocess."""
    root = tmp_path_factory.mktemp("hostile")
    files = {}
    for kind, payload in PAYLOADS.items():
        for name in NAMES:
            folder = root / f"{kind}-{name}"
            folder.mkdir()
            marker = str(folder / "ran.npy")
            torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state(),
                        "payload": payload(marker)}, folder / name)
            files[str(folder / name)] = marker
    library_runner.python(LOADER, *files, cwd=str(root))
    return {p: os.path.exists(m) for p, m in files.items()}


def _pickled_globals(path: str, record: str = "/data.pkl") -> set[str]:
    """Every GLOBAL of the torch.save zip's data.pkl, as pickletools reads it (torch.save writes protocol 2, with
    Python 2 module names the unpickler maps back: _compat_pickle.IMPORT_MAPPING)."""
    with zipfile.ZipFile(path) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith(record)))
    names = [arg.split(" ") for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"]
    return {f"{IMPORT_MAPPING.get(module, module)}.{name}" for module, name in names}


def test_hostile_rng_states_stay_unsafe(hostile):
    assert len(hostile) == len(PAYLOADS) * len(NAMES) and all(hostile.values()), "every payload runs under torch.load"
    for p in hostile:
        with pytest.raises(pickle.UnpicklingError) as e:
            _loader(p)   # the library's own loader refuses it...
        refused = re.search(r"GLOBAL ([\w.]+)", str(e.value)).group(1)   # torch's message drops "builtins."
        (beyond,) = _pickled_globals(p) - TORCH_ALLOWED - _trainer_adds()
        assert beyond.removeprefix("builtins.") == refused
        r = scan_path(p)   # ...and scan says what torch.load without weights_only would run
        assert r["status"] == "unsafe" and r["would_run_code"], p
        assert r["unsafe_globals"] == [beyond] and r["verdict"].startswith("UNSAFE: torch.load without weights_only")


def test_folder_scan_and_audit_of_a_trainer_run(run, hostile, tmp_path):
    ckpt = run / "run" / "checkpoint-1"
    files = {f["path"]: f for f in scan_path(ckpt)["files"]}
    assert files["rng_state.pth"]["status"] == "safe"
    # judged as torch.load's: transformers' and accelerate's classes, rebuilt without a call (test_scan_plain_data.py)
    assert files["training_args.bin"]["status"] == "safe" and files["training_args.bin"]["plain_data_globals"]
    (unit,), _ = discover(str(run / "run"))
    rows = {os.path.basename(f["file"]): f["status"] for f in audit_record(unit)["scan"]["files"]}
    assert rows["rng_state.pth"] == "safe" and rows["training_args.bin"] == "safe"
    bad = tmp_path / "checkpoint-1"   # the same folder with a hostile rng_state.pth
    shutil.copytree(ckpt, bad)
    shutil.copy(next(p for p in hostile if p.endswith("os.system-rng_state.pth/rng_state.pth")), bad / "rng_state.pth")
    assert {f["path"]: f for f in scan_path(bad)["files"]}["rng_state.pth"]["status"] == "unsafe"
