"""`ckptstat scan` of training checkpoints whose pickles name plain data outside torch's weights_only allowlist (timm's
and fairseq's `args` Namespace, numpy scalars and arrays, omegaconf `hyper_parameters`, paths, torch.__version__):
safe, the plain data listed, torch.load(weights_only=True)'s refusal said (formats/torch/data_classes.py PLAIN_DATA,
docs/torch.md "ckptstat scan"); anything that reaches past plain data stays UNSAFE.

Oracles: torch and pickle themselves, never ckptstat's output.
- Each real save of test_torch_data_classes.CASES (zip and legacy, pickle protocols 2 to 5): torch.load(
  weights_only=True) refuses it, `get_unsafe_globals_in_checkpoint` names exactly the globals scan calls plain data, and
  torch.load(weights_only=False) loads it in a child process under an audit hook (sys.addaudithook) that records every
  event of running code or importing a package, starting a process, touching a socket or writing a file: none fires.
- Look-alikes that reach past plain data with the same globals' modules (getattr of a path class's method, a method of
  a plain class named by its qualified name, numpy's and omegaconf's savers): each payload writes its marker under
  torch.load(weights_only=False) in a child process, and scan says UNSAFE naming the global.
- BUILD on a class itself (no pickler writes it): the loaded class carries the attribute afterwards (it changed for the
  whole process), and scan says UNSAFE."""
from __future__ import annotations

import argparse
import json
import pathlib
import pickle
import re

import library_runner
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("omegaconf")

from conftest import ROOT, fixture_script  # noqa: E402
from test_scan_differential import LOADER as DIFFERENTIAL_LOADER  # noqa: E402
from test_scan_tree import _torch_zip  # noqa: E402
from test_torch_data_classes import CASES, _globals_outside_allowlist, _model  # noqa: E402 - the real training saves

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.torch_load import scan  # noqa: E402
from ckptstat.errors import CkptstatError  # noqa: E402
from ckptstat.formats.torch.data_classes import CALLBACK_KEYS, PLAIN_DATA, TRAINER_CLASSES  # noqa: E402

# torch.load(weights_only=False) of argv[1] under an audit hook; writes to argv[2] the events that would mean the file
# ran code (the libraries its plain data needs imported first, as the script that reads it has them). eval and
# exec of text fire "exec" too; "compile" alone is torch's own (typing's forward references)
AUDITED_LOAD = r"""
import argparse, datetime, importlib, json, os, pathlib, sys, warnings
import numpy, omegaconf, torch
warnings.simplefilter("ignore")
for module in sys.argv[3:]:
    importlib.import_module(module)
SEEN, ON = [], [True]
WATCHED = ("exec", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.kill",
           "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.symlink", "os.link", "os.truncate",
           "subprocess.Popen", "socket.", "ctypes.", "shutil.", "pty.spawn", "webbrowser")
# the loaders' own lazy imports (torch.load imports torch.utils.serialization...) run their modules' code: not the file's
packages = {m.split(".")[0] for m in sys.modules}
roots = tuple(os.path.dirname(f) + os.sep for f in (getattr(sys.modules[p], "__file__", None) for p in packages)
              if f and f.endswith("__init__.py"))
def hook(event, args):
    if not ON[0] or event == "exec" and getattr(args[0], "co_filename", "").startswith(roots):
        return
    if event.startswith(WATCHED) or event == "import" and args[0].split(".")[0] not in packages or (
            event == "open" and (not isinstance(args[1], str) or any(c in args[1] for c in "wax+"))):
        SEEN.append(event + " " + repr(args)[:120])
sys.addaudithook(hook)
obj = torch.load(sys.argv[1], weights_only=False)
ON[0] = False
with open(sys.argv[2], "w") as f:
    json.dump(SEEN, f)
"""

# test_scan_differential's torch.load(weights_only=False) of each path, in the file's folder; then the marker a BUILD on
# a class leaves
LOADER = DIFFERENTIAL_LOADER + """
import argparse
if getattr(argparse.Namespace, "ckptstat_marker", None):
    open("build-marker", "w").close()
"""


def _audited_load(path: str, tmp_path, *modules: str) -> list[str]:
    """The events of torch.load(path), `modules` imported first (dataclasses' generated methods are exec'd text)."""
    out = tmp_path / "events.json"
    assert library_runner.python(AUDITED_LOAD, path, str(out), *modules) == 0
    return json.loads(out.read_text())


def _saved(tmp_path, name: str, legacy: bool, protocol: int) -> str:
    path = str(tmp_path / f"{name}.pt")
    torch.save(CASES[name](), path, _use_new_zipfile_serialization=not legacy, pickle_protocol=protocol)
    return path


@pytest.mark.parametrize("legacy, protocol", [(False, 2), (True, 2), (False, 4), (False, 5), (True, 5)],
                         ids=["zip", "legacy", "zip-p4", "zip-p5", "legacy-p5"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_real_training_saves_scan_safe_naming_their_plain_data(tmp_path, name, legacy, protocol):
    path = _saved(tmp_path, name, legacy, protocol)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(path, weights_only=True)
    r = scan(path)
    assert r["status"] == "safe" and not r["would_run_code"] and r["unsafe_globals"] == [], r["verdict"]
    assert r["plain_data_globals"] == _globals_outside_allowlist(path)   # (what torch.load's unpickler looks up)
    assert set(r["plain_data_globals"]) <= PLAIN_DATA
    assert r["weights_only_loadable"] is False and r["weights_only_refusal"]
    assert "plain data" in r["verdict"] and "torch.load(weights_only=True) refuses the file" in r["verdict"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_load_of_them_runs_nothing(tmp_path, name):
    """What `safe` promises, seen from inside the loading process: no code compiled or run, no module imported, no
    process, socket or file written."""
    path = _saved(tmp_path, name, legacy=False, protocol=2)
    assert _audited_load(path, tmp_path) == []


# ------------------------------------------------------------------------------------------------- look-alikes

class _Call:
    """Pickles as `fn(*args)` (REDUCE); callable, so it can itself be the function of another REDUCE."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args

    def __call__(self, *args):   # (pickle asks that a REDUCE's function be callable; never called)
        raise AssertionError


def _payloads(marker: str) -> dict[str, tuple[object, str]]:
    """name -> (what torch.save writes, the global scan must name): each writes `marker` when unpickled."""
    import omegaconf

    where = pathlib.PosixPath(marker)
    return {
        # getattr of a plain class: any of its methods, here Path.write_text, called with plain data
        "getattr": (_Call(_Call(getattr, pathlib.PosixPath, "write_text"), where, "x"), "builtins.getattr"),
        # the same method named by its qualified name (protocol 4's STACK_GLOBAL)
        "qualname": (_Call(pathlib.PosixPath.write_text, where, "x"), "pathlib.Path.write_text"),
        "numpy.save": (_Call(np.save, marker, np.zeros(1)), "numpy.save"),
        "omegaconf.save": (_Call(omegaconf.OmegaConf.save, omegaconf.OmegaConf.create({"a": 1}), marker),
                           "omegaconf.omegaconf.OmegaConf.save"),
    }


@pytest.mark.parametrize("case", ["getattr", "qualname", "numpy.save", "omegaconf.save"])
def test_look_alikes_that_run_code_are_unsafe(tmp_path, case):
    marker = "marker.npy" if case == "numpy.save" else "marker"
    obj, glob = _payloads(marker)[case]
    path = str(tmp_path / f"{case}.pt")
    torch.save({"args": argparse.Namespace(lr=0.1), "metric": np.float64(1.5), "state_dict": _model(), "x": obj},
               path, pickle_protocol=4)
    assert library_runner.python(LOADER, path, cwd=str(tmp_path)) == 0
    assert (tmp_path / marker).exists(), "the payload did not run: the case proves nothing"
    r = scan(path)
    assert r["status"] == "unsafe" and glob in r["unsafe_globals"], r["verdict"]
    assert "argparse.Namespace" in r["plain_data_globals"] and "argparse.Namespace" not in r["unsafe_globals"]


@pytest.mark.parametrize("glob", ["argparse.Namespace", "pathlib.PosixPath", "torch._utils._rebuild_tensor_v2"])
def test_build_on_a_class_itself_is_unsafe(tmp_path, glob):
    """BUILD of (None, {attribute: value}) on the imported global: pickle sets the attribute on the class or function
    itself, for the whole process (the loader sees it afterwards on argparse.Namespace)."""
    module, _, name = glob.rpartition(".")
    pkl = (b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\nN}X\x0f\x00\x00\x00ckptstat_markerK\x01s\x86b"
           b"0}.")
    path = tmp_path / "b.pt"
    path.write_bytes(_torch_zip(pkl))
    assert library_runner.python(LOADER, str(path), cwd=str(tmp_path)) == 0
    assert (tmp_path / "build-marker").exists() is (glob == "argparse.Namespace")
    r = scan(path)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [glob], r["verdict"]
    assert "its attributes set by BUILD" in r["verdict"]
    (finding,) = r["findings"]
    assert finding["opcode"] == "BUILD" and finding["global"] == glob


def test_getattr_is_never_plain_data():
    assert "builtins.getattr" not in PLAIN_DATA and "argparse.Namespace" in PLAIN_DATA


# ------------------------------------------------------------------------------------------------- folders, numpy

def test_a_folder_scan_names_the_plain_data(tmp_path, cli):
    for name in ("timm", "lightning-hydra"):
        torch.save(CASES[name](), tmp_path / f"{name}.pth.tar")
    obj, _ = _payloads("marker")["getattr"]
    torch.save({"args": argparse.Namespace(lr=0.1), "x": obj}, tmp_path / "evil.pth.tar")
    rc, out, _ = cli("scan", str(tmp_path))
    text = " ".join(out.split())   # (a line wraps at the console's width)
    assert rc == 1 and "2 safe, 1 unsafe" in text
    plain = ", ".join(_globals_outside_allowlist(str(tmp_path / "timm.pth.tar")))   # (torch's own unpickler's)
    assert f"SAFE timm.pth.tar plain data: {plain}" in text
    assert "UNSAFE evil.pth.tar builtins.getattr" in text
    files = {f["path"]: f for f in scan_path(str(tmp_path))["files"]}
    assert "omegaconf.dictconfig.DictConfig" in files["lightning-hydra.pth.tar"]["plain_data_globals"]


def test_numpy_object_arrays_of_plain_data(tmp_path):
    """np.save of an object array holding plain data: np.load(allow_pickle=True) builds it, scan says safe and names
    the plain data; an array holding a payload stays UNSAFE."""
    import datetime

    values = np.array([datetime.date(2024, 5, 1), pathlib.PurePosixPath("/data"), argparse.Namespace(lr=0.1)],
                      dtype=object)
    path = str(tmp_path / "meta.npy")
    np.save(path, values, allow_pickle=True)
    assert list(np.load(path, allow_pickle=True)) == list(values)
    r = scan_path(path)
    assert r["status"] == "safe" and "plain data" in r["verdict"], r["verdict"]
    assert {"argparse.Namespace", "datetime.date", "pathlib.PurePosixPath"} <= set(r["plain_data_globals"])


# ------------------------------------------------------------------------------------------------- training_args.bin

transformers = pytest.importorskip("transformers")
_trainer_classes = fixture_script("make_trainer_classes")
VARIANTS = range(len(_trainer_classes._variants()))   # (each TrainingArguments variant the table was written from)


def test_the_trainer_table_is_the_installed_libraries():
    """formats/trainer_classes.json is what fixtures/make_trainer_classes.py finds in the installed transformers and
    accelerate (re-run it when the lock moves them); its TRL rows were written with trl (not in the test install), each
    one of trl's trainers' configs, an object."""
    import accelerate

    written = json.loads(pathlib.Path(ROOT, "ckptstat", "formats", "trainer_classes.json").read_text())
    assert (written["transformers"], written["accelerate"]) == (transformers.__version__, accelerate.__version__)
    assert written["classes"] == TRAINER_CLASSES
    ours = {n: k for n, k in TRAINER_CLASSES.items() if not n.startswith(_trainer_classes.TRL_MODULE)}
    assert ours == _trainer_classes.table(with_trl=False)
    trl = {n: k for n, k in TRAINER_CLASSES.items() if n not in ours}
    assert written["trl"] and trl and all(re.fullmatch(r"trl\.trainer\.\w+_config\.\w+Config", n) and k == "object"
                                          for n, k in trl.items())


def test_a_trl_runs_training_args(tmp_path):
    """fixtures/trl/training_args.bin, an SFTConfig as TRL's trainer saves it (written with trl 1.16.0 by
    fixtures/make_trainer_classes.py, with what torch listed and loaded back: expected.json): safe, torch's list as its
    plain data; each argument as torch.load gave it back (its numbers, strings and booleans: expected.json)."""
    folder = pathlib.Path(ROOT, "fixtures", "trl")
    expected = json.loads((folder / "expected.json").read_text())
    r = scan(folder / "training_args.bin")
    assert r["status"] == "safe" and r["plain_data_globals"] == expected["globals"], r["verdict"]
    objects = open_checkpoint(str(folder / "training_args.bin")).objects
    shown = {k: v for k, v in expected["arguments"].items() if v is not None}   # (a top-level None is no value)
    assert {k: objects[k]["value"] for k in shown} == shown
    assert objects["max_length"]["value"] == expected["arguments"]["max_length"] and objects["packing"]["value"] is \
        expected["arguments"]["packing"]   # (SFTConfig's own fields, not TrainingArguments')


@pytest.mark.parametrize("i", VARIANTS)
def test_training_args_scan_safe_and_load_running_nothing(tmp_path, i):
    """The Trainer's `torch.save(self.args, "training_args.bin")` of TrainingArguments and Seq2SeqTrainingArguments
    (defaults, every strategy and option set): safe, the classes torch lists outside its allowlist named as plain data;
    torch.load(weights_only=False) of it runs nothing (the audit hook)."""
    path = tmp_path / "training_args.bin"
    torch.save(_trainer_classes._variants()[i], path)
    r = scan(path)
    assert r["status"] == "safe" and r["plain_data_globals"] == _globals_outside_allowlist(str(path)), r["verdict"]
    modules = {n.rpartition(".")[0] for n in TRAINER_CLASSES if not n.startswith(_trainer_classes.TRL_MODULE)}
    assert _audited_load(str(path), tmp_path, *sorted(modules)) == []


def _as_read(v: object) -> object:
    """What torch.load gives back, as the reader shows it: an object's attributes, an enum member's value, a device
    as its text."""
    import enum

    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, torch.device):
        return str(v)
    if isinstance(v, dict):
        return {k: _as_read(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_as_read(x) for x in v)
    return _as_read(vars(v)) if hasattr(v, "__dict__") and type(v).__module__.startswith(("transformers", "accelerate")) \
        else v


@pytest.mark.parametrize("i", VARIANTS)
def test_training_args_read_as_torch_gives_them(tmp_path, i):
    """`ckptstat summary training_args.bin` lists the arguments, each as torch.load(weights_only=False) gives it back
    (enums by value, their class as the type), nothing imported or called."""
    from test_torch_data_classes import _values

    path = str(tmp_path / "training_args.bin")
    torch.save(_trainer_classes._variants()[i], path)
    ckpt = open_checkpoint(path)
    want = torch.load(path, weights_only=False)
    assert {k: o["value"] for k, o in ckpt.objects.items()} == _values(_as_read(want), "training_args.bin")
    assert ckpt.objects["lr_scheduler_type"]["type"] == type(want.lr_scheduler_type).__name__
    assert not ckpt.tensors


def _reduce(cls: str, args: bytes) -> bytes:
    """A protocol 2 data.pkl that calls `cls` with the pickled tuple `args` (REDUCE)."""
    module, _, name = cls.rpartition(".")
    return b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n" + args + b"R."


@pytest.mark.parametrize("cls, args, called", [
    ("transformers.training_args.TrainingArguments", ("/tmp/out",), True),   # its __init__ and __post_init__ run
    ("transformers.training_args.TrainingArguments", (), True),
    ("transformers.trainer_utils.IntervalStrategy", ("steps", "epoch"), True),   # Enum's functional API
    ("transformers.trainer_utils.IntervalStrategy", ("steps",), False),           # a member looked up: as pickled
])
def test_a_trainer_class_called_is_unsafe(tmp_path, cls, args, called):
    path = tmp_path / "training_args.bin"
    path.write_bytes(_torch_zip(_reduce(cls, pickle.dumps(args, 2)[2:-1])))
    r = scan(path)
    assert (r["status"] == "unsafe") is called and (cls in r["unsafe_globals"]) is called, r["verdict"]
    if called:   # the reader refuses what scan calls unsafe: it builds the objects and looks members up, nothing else
        with pytest.raises(CkptstatError, match=re.escape(cls)):
            open_checkpoint(str(path))
    assert (cls in r["plain_data_globals"]) is not called
    if called:
        (finding,) = r["findings"]
        assert finding["opcode"] == "call" and finding["global"] == cls


def test_a_training_args_class_outside_the_table_stays_unsafe_with_the_note(tmp_path, monkeypatch):
    """A lab's own TrainingArguments subclass (its module, not in the table): importing it runs the lab's code, so the
    file stays UNSAFE, the class named, with the note that the Trainer never loads the file back."""
    import sys
    import types

    class MyArgs(transformers.TrainingArguments):
        pass

    MyArgs.__module__, MyArgs.__qualname__ = "mylab.args", "MyArgs"
    for name in ("mylab", "mylab.args"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["mylab.args"].MyArgs = MyArgs   # type: ignore[attr-defined]
    path = tmp_path / "training_args.bin"
    torch.save(MyArgs(output_dir=str(tmp_path / "out"), report_to=[]), path)
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["mylab.args.MyArgs"], r["verdict"]
    assert any("never loads back" in n for n in r["notes"])


def test_mutated_training_args_read_or_give_one_error(tmp_path):
    """600 seeded mutants of a Seq2SeqTrainingArguments' data.pkl: the reader reads each or ends in a CkptstatError,
    and scan judges each or ends in one (23,000 such mutants ran clean when this landed)."""
    from zip_mutants import outcomes

    from ckptstat.analysis.summary import summarize

    src = str(tmp_path / "training_args.bin")
    torch.save(_trainer_classes._variants()[3], src)

    def both(path: str) -> object:
        try:
            scan(path)
        except CkptstatError:
            pass
        return summarize(open_checkpoint(path))

    seen = outcomes(src, lambda n: n.endswith("data.pkl"), 600, 5, str(tmp_path / "m.bin"), both)
    assert set(seen) <= {"read", "CorruptCheckpointError", "UnsafeCheckpointError"} and "read" in seen, seen


# ------------------------------------------------------------------------------------- Lightning < 1.5 callback keys

CALLBACK_STUB = r"""
import sys, types
def stub(qualified):
    module, _, name = qualified.rpartition(".")
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    class Meta(type):   # the class called (REDUCE, NEWOBJ runs __new__ through the class) leaves a marker
        def __call__(cls, *a, **k):
            open("called-marker", "w").close()
            return super().__call__(*a, **k)
    cls = Meta(name, (), {"__module__": module, "__qualname__": name})
    setattr(sys.modules[module], name, cls)
    return cls
"""
MODEL_CHECKPOINT = "pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint"
EARLY_STOPPING = "pytorch_lightning.callbacks.early_stopping.EarlyStopping"


@pytest.fixture
def lightning_1x():
    """Lightning 1.4's callback classes (stubs under their real modules: Lightning 1.x needs an old torch), as its
    pickles name them; a call of one leaves `called-marker` in the working folder."""
    import sys
    before = set(sys.modules)
    space: dict[str, object] = {}
    exec(CALLBACK_STUB, space)
    yield {q: space["stub"](q) for q in (MODEL_CHECKPOINT, EARLY_STOPPING)}   # type: ignore[operator]
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _stable_diffusion_1x(classes: dict[str, type], shared: bool = False) -> dict[str, object]:
    """What Lightning 1.4's dump_checkpoint writes (sd-v1-4.ckpt's layout): `callbacks` keyed by the class."""
    ckpt: dict[str, object] = {
        "epoch": 6, "global_step": 470000, "pytorch-lightning_version": "1.4.2",
        "state_dict": {f"model.{k}": v for k, v in _model().items()},
        "callbacks": {classes[MODEL_CHECKPOINT]: {"monitor": None, "best_model_score": torch.tensor(0.25),
                                                  "best_model_path": "/ckpt/epoch=6.ckpt"},
                      classes[EARLY_STOPPING]: {"wait_count": 0, "patience": 3}}}
    if shared:   # the class named again through the memo, again as a key
        ckpt["more_callbacks"] = {classes[MODEL_CHECKPOINT]: {"kth_value": torch.tensor(1.0)}}
    return ckpt


@pytest.mark.parametrize("legacy, protocol, shared", [(False, 2, False), (True, 2, False), (False, 4, True),
                                                      (True, 5, True)],
                         ids=["zip", "legacy", "zip-p4-memo", "legacy-p5-memo"])
def test_lightning_1x_callback_classes_as_keys_scan_safe(tmp_path, lightning_1x, legacy, protocol, shared):
    """Stable Diffusion 1.x's .ckpt: the callback classes only hashed as keys. torch.load runs nothing of them (the
    stubs' metaclass sees no call), torch lists them outside its allowlist, and scan calls them plain data."""
    path = str(tmp_path / "sd.ckpt")
    torch.save(_stable_diffusion_1x(lightning_1x, shared), path, _use_new_zipfile_serialization=not legacy,
               pickle_protocol=protocol)
    code = CALLBACK_STUB + f"stub({MODEL_CHECKPOINT!r}); stub({EARLY_STOPPING!r})\n" + DIFFERENTIAL_LOADER
    assert library_runner.python(code, path, cwd=str(tmp_path)) == 0
    assert not (tmp_path / "called-marker").exists()
    r = scan(path)
    assert r["status"] == "safe" and r["unsafe_globals"] == [], r["verdict"]
    assert r["plain_data_globals"] == _globals_outside_allowlist(path) == sorted((EARLY_STOPPING, MODEL_CHECKPOINT))
    assert r["weights_only_loadable"] is False


def test_the_callback_table_is_lightnings():
    """The table holds what Lightning 1.0 to 1.4 keyed by (their wheels' source, by the script), ModelCheckpoint
    among them, and nothing else: every name a class under pytorch_lightning.callbacks."""
    table = json.loads((pathlib.Path(ROOT) / "ckptstat" / "formats" / "lightning_callbacks.json").read_text())
    assert table["generated_by"] == "fixtures/make_lightning_callbacks.py"
    assert table["pytorch_lightning"] == list(fixture_script("make_lightning_callbacks").RELEASES)
    assert CALLBACK_KEYS == set(table["classes"]) and MODEL_CHECKPOINT in CALLBACK_KEYS
    assert all(re.fullmatch(r"pytorch_lightning\.callbacks\.\w+\.[A-Z]\w*", c) for c in CALLBACK_KEYS)
    assert not CALLBACK_KEYS & (PLAIN_DATA | set(TRAINER_CLASSES))


def _module_name(qualified: str) -> bytes:
    module, _, name = qualified.rpartition(".")
    return module.encode() + b"\n" + name.encode() + b"\n"


# Hand-written pickles (no pickler writes them): the class a key and also pushed again (DUP) and called; a key and
# also a value; called only; built; a key of an object a call returned. Each must be UNSAFE; `runs`: torch.load calls
# the class (the stub's marker).
KEYED_ABUSE = {
    "dup-called": (b"\x80\x02}c" + _module_name(MODEL_CHECKPOINT) + b"2)Rs.", True),
    "memo-called": (b"\x80\x02}c" + _module_name(MODEL_CHECKPOINT) + b"q\x00}sh\x00)R0.", True),
    "a-value": (b"\x80\x02}(c" + _module_name(MODEL_CHECKPOINT) + b"q\x00}X\x03\x00\x00\x00clsh\x00u.", False),
    "called": (b"\x80\x02}X\x01\x00\x00\x00xc" + _module_name(MODEL_CHECKPOINT) + b")Rs.", True),
    "newobj": (b"\x80\x02c" + _module_name(MODEL_CHECKPOINT) + b")\x81.", False),   # (__new__: no __call__)
    # a key of what a call returned (its __setitem__ runs), not of a dict the pickle made
    "a-call's-key": (b"\x80\x02ccollections\nOrderedDict\n)Rc" + _module_name(MODEL_CHECKPOINT) + b"}s.", False),
}


@pytest.mark.parametrize("case", sorted(KEYED_ABUSE))
def test_a_callback_class_used_beside_keys_is_unsafe(tmp_path, case):
    pkl, runs = KEYED_ABUSE[case]
    path = tmp_path / "sd.ckpt"
    path.write_bytes(_torch_zip(pkl))
    code = CALLBACK_STUB + f"stub({MODEL_CHECKPOINT!r})\n" + DIFFERENTIAL_LOADER
    assert library_runner.python(code, str(path), cwd=str(tmp_path)) == 0
    assert (tmp_path / "called-marker").exists() is runs
    r = scan(path)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [MODEL_CHECKPOINT], r["verdict"]
    assert r["plain_data_globals"] == []


def test_a_callback_class_handed_back_by_a_persistent_id_and_called_is_unsafe(tmp_path):
    """(A red team of scan, 2026-12-07.) In the legacy stream torch's persistent_load hands back a ('module', cls, '',
    '') id's class: the id's tuple, memoised, fetched again and handed over a second time gives a copy of the class
    that no GLOBAL, GET or DUP pushed. One copy a dict's key, the other called: the walk counted one push, one key."""
    text = b"X\x06\x00\x00\x00module"
    pid = b"(" + text + b"c" + _module_name(MODEL_CHECKPOINT) + b"X\x00\x00\x00\x00X\x00\x00\x00\x00tq\x00"
    main = b"\x80\x02}" + pid + b"QX\x01\x00\x00\x00vs" + b"h\x00Q)R0."
    sysinfo = pickle.dumps({"protocol_version": 1001, "little_endian": True,
                            "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    path = tmp_path / "sd.ckpt"
    path.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2) + sysinfo
                     + main + pickle.dumps([], protocol=2))
    code = CALLBACK_STUB + f"stub({MODEL_CHECKPOINT!r})\n" + DIFFERENTIAL_LOADER
    library_runner.python(code, str(path), cwd=str(tmp_path))
    assert (tmp_path / "called-marker").exists()
    r = scan(path)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [MODEL_CHECKPOINT], r["verdict"]


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_a_type_only_named_called_on_a_config_is_unsafe(tmp_path, kind):
    """(A red team of scan, 2026-12-07.) `builtins.dict` and the other types omegaconf's metadata names are plain data
    as names; called on a DictConfig or ListConfig (dict(cfg), list(cfg), str(cfg)) they read its values, which
    resolves its interpolations with the loading process's resolvers: `${eval:...}` ran code under torch.load in a
    process that registered `eval` (as Hydra projects do). (str(cfg) does not resolve; any call with arguments is a
    finding all the same: str(x) runs x's __str__.)"""
    from omegaconf import OmegaConf
    marker = tmp_path / "resolved-marker"
    text = "${eval:\"open('resolved-marker', 'w').close() or 1\"}"   # (the loader's folder is tmp_path)
    cfg = OmegaConf.create({"a": text}) if kind != "list" else OmegaConf.create([text])

    class Call:
        def __reduce__(self):
            return {"dict": dict, "list": list}[kind], (cfg,)

    path = tmp_path / "last.ckpt"
    torch.save({"w": torch.zeros(2), "hparams": Call()}, path)
    code = ("import torch, warnings\nwarnings.simplefilter('ignore')\nfrom omegaconf import OmegaConf\n"
            "OmegaConf.register_new_resolver('eval', eval)\n"
            f"torch.load({str(path)!r}, weights_only=False)\n")
    library_runner.python(code, cwd=str(tmp_path))
    assert marker.exists()
    r = scan(path)
    assert r["status"] == "unsafe" and f"builtins.{kind}" in r["unsafe_globals"], r["verdict"]
