"""Training checkpoints whose pickles name plain-data classes outside torch's weights_only allowlist (timm's and
fairseq's `args` Namespace, numpy scalars and arrays, omegaconf `hyper_parameters`, paths, torch.__version__):
read as the data they hold, nothing imported (formats/torch/data_classes.py, docs/torch.md "Training scripts' data").

Oracles: torch itself. `torch.serialization.get_unsafe_globals_in_checkpoint` lists the globals the file names
outside its allowlist (the reader's note lists the same); `torch.load(weights_only=True)` refuses the file, and loads
it once those classes are named in `torch.serialization.safe_globals`, as its error tells users to: the tensors,
their values and the plain values are compared with what it gives back."""
from __future__ import annotations

import argparse
import enum
import importlib
import json
import os
import pathlib
import pickle
import zipfile

import numpy as np
import pytest
import torch
from conftest import ROOT

from ckptstat import CorruptCheckpointError, UnsafeCheckpointError, open_checkpoint

omegaconf = pytest.importorskip("omegaconf")
OmegaConf = omegaconf.OmegaConf


def _timm_args() -> argparse.Namespace:
    """What timm's train.py saves as `args`: a parser's Namespace (a subset of its flags, as it parses them)."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--mean", type=float, nargs=3, default=None)
    p.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("/data/imagenet"))
    return p.parse_args(["--lr", "0.5", "--amp", "--mean", "0.485", "0.456", "0.406"])


def _model() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    return m.state_dict()


def _hydra_cfg():
    return OmegaConf.create({"model": {"hidden": 64, "layers": [2, 2, 6], "act": "gelu", "ckpt": None},
                             "optim": {"lr": 3e-4, "betas": [0.9, 0.95]}, "seed": 7, "out": "${model.act}",
                             "todo": "???"})


def _dtype_scalars() -> dict[str, object]:
    return {str(t.__name__): t(3) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64,
                                              np.complex128)}


# name -> the object torch.save writes (each a layout real training code saves)
CASES = {
    # timm train.py CheckpointSaver: epoch, arch, state_dict, optimizer, version, args, metric
    "timm": lambda: {"epoch": 12, "arch": "resnet50", "state_dict": _model(), "version": 2, "args": _timm_args(),
                     "metric": np.float64(76.25)},
    # fairseq < 0.10: args Namespace beside the model and extra_state
    "fairseq": lambda: {"args": argparse.Namespace(arch="transformer", dropout=0.1, max_tokens=4096, phase=1 + 2j,
                                                   data="/data/wmt16"),
                        "model": _model(), "extra_state": {"epoch": 3, "best": np.float32(4.5)},
                        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "num_updates": 100}]},
    # Megatron-LM (torch format): args, iteration, rng_state with numpy's generator state (an array)
    "megatron": lambda: {"args": argparse.Namespace(num_layers=2, hidden_size=4, params_dtype=torch.float16),
                         "iteration": 1000, "model": _model(),
                         "rng_state": [{"random_rng_state": None, "np_rng_state": np.random.RandomState(1).get_state(),
                                        "torch_rng_state": torch.get_rng_state()}]},
    # Lightning under Hydra: hyper_parameters holds the DictConfig save_hyperparameters() kept
    "lightning-hydra": lambda: {"epoch": 4, "global_step": 40, "pytorch-lightning_version": "2.5.0",
                                "state_dict": {f"model.{k}": v for k, v in _model().items()},
                                "hyper_parameters": {"cfg": _hydra_cfg(), "lists": OmegaConf.create([1, {"a": 2}])}},
    # numpy scalars of every dtype, torch.__version__, a path, a numpy array, saved beside the weights
    "scalars": lambda: {"state_dict": _model(), "stats": _dtype_scalars(), "torch_version": torch.__version__,
                        "out_dir": pathlib.PurePosixPath("/runs/exp1"), "class_counts": np.arange(10, dtype=np.int32)},
}


def _save(tmp_path, name: str, legacy: bool = False, protocol: int = 2) -> tuple[str, object]:
    obj = CASES[name]()
    tmp_path.mkdir(exist_ok=True)
    path = str(tmp_path / f"{name}.pt")
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy, pickle_protocol=protocol)
    return path, obj


def _resolve(full: str) -> object:
    module, _, attr = full.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _oracle(path: str, listed: str | None = None) -> tuple[list[str], object]:
    """The globals torch names outside its allowlist (in `listed`, the same object saved as a zip, for a legacy file:
    torch lists a zip's only), and what torch.load(weights_only=True) gives once the user allows them (numpy
    dtypes' classes too: its BUILD asks for the type of the dtype object)."""
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(listed or path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(path, weights_only=True)
    allowed = [_resolve(g) for g in unsafe]
    allowed += [type(np.dtype(c)) for c in ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1",
                                             "c8", "c16")]
    with torch.serialization.safe_globals(allowed):
        return unsafe, torch.load(path, weights_only=True)


def _globals_outside_allowlist(path: str) -> list[str]:
    """What get_unsafe_globals_in_checkpoint says, for pickles it cannot walk (frames, BINBYTES): the globals
    torch.load(weights_only=False) looks up as it loads the test's own file, Python 2 names mapped as its unpickler
    maps them (protocol 2 writes `__builtin__.complex`), less torch's allowlist."""
    import types
    from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

    from torch import _weights_only_unpickler as wo

    looked_up: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            # (mapped whatever the protocol: Python 3's module names are no keys of the mapping)
            module, name = NAME_MAPPING.get((module, name), (IMPORT_MAPPING.get(module, module), name))
            looked_up.add(f"{module}.{name}")
            return super().find_class(module, name)

    torch.load(path, weights_only=False, pickle_module=types.SimpleNamespace(Unpickler=Recording, load=pickle.load,
                                                                             __name__="pickle"))
    return sorted(looked_up - set(wo._get_allowed_globals()))


def _tensors(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    out: dict[str, torch.Tensor] = {}
    for k, v in items:
        out.update(_tensors(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _plain(v: object) -> object:
    """The value as the reader shows it: a Namespace's attributes, a config's container (not resolved), numpy
    scalars as numbers, paths and versions as text, JSON's lists for tuples."""
    if isinstance(v, argparse.Namespace):
        return {k: _plain(x) for k, x in vars(v).items()}
    if isinstance(v, (omegaconf.DictConfig, omegaconf.ListConfig)):
        return _plain(OmegaConf.to_container(v, resolve=False))
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return _plain(v.item())
    if isinstance(v, enum.Enum):   # a member: its value (its class is the row's type)
        return v.value
    if isinstance(v, complex):
        return str(v)
    if isinstance(v, (pathlib.PurePath, torch.dtype)):
        return str(v)
    return v


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_read_as_torch_loads_it_with_the_classes_allowed(tmp_path, name, legacy):
    path, _ = _save(tmp_path, name, legacy)
    unsafe, want = _oracle(path, _save(tmp_path / "zip", name)[0] if legacy else None)
    ckpt = open_checkpoint(path)
    # the tensors: names, shapes, dtypes, values as torch gives them back
    tensors = _tensors(want)
    assert sorted(ckpt.tensors) == sorted(tensors)
    for n, t in tensors.items():
        info = ckpt.tensors[n]
        assert info.shape == tuple(t.shape), n
        np.testing.assert_array_equal(ckpt.read(n).reshape(t.shape), t.numpy(), err_msg=n)
    # the note names exactly the globals torch names
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    listed = _listed(note)
    assert sorted(listed) == sorted(unsafe)
    # top-level plain values as metadata, numpy scalars as their numbers
    for k, v in want.items():
        if isinstance(v, (int, float, str, bool, np.generic)) and not isinstance(v, np.ndarray):
            assert ckpt.metadata[k] == str(_plain(v)), k


def _listed(note: str) -> list[str]:
    return note.split("kept as its name): ")[1].split(";")[0].split(", ")


def _leaves(prefix: str, v: object) -> dict[str, object]:
    """The reader's dotted names for a data value's leaves (lists of containers flattened, as objects are; an empty
    dict is a value)."""
    if isinstance(v, dict) and v:
        out: dict[str, object] = {}
        for k, x in v.items():
            out.update(_leaves(f"{prefix}.{k}", x))
        return out
    if isinstance(v, list) and v and all(isinstance(x, (dict, list)) for x in v):
        out = {}
        for i, x in enumerate(v):
            out.update(_leaves(f"{prefix}.{i}", x))
        return out
    return {prefix: v}


def _values(want: object, file: str = "") -> dict[str, object]:
    """Every value torch gives back beside the tensors, below the top level, as the objects list names them: dicts by
    key, lists and tuples holding only containers or tensors by index (the rule DCP's items and Megatron's common.pt
    follow), eight levels deep, an empty one a value; a Namespace's attributes and a config's values as dicts, numpy
    arrays by shape and dtype; a value holding a tensor is none (its tensors are listed); the top level's None and
    empty containers nothing (an empty object: nothing at all), a plain object that is no container the value named
    `file`."""
    out: dict[str, object] = {}

    def holds_tensor(v: object) -> bool:
        return isinstance(v, torch.Tensor) or isinstance(v, (dict, list, tuple)) and any(
            holds_tensor(x) for x in (v.values() if isinstance(v, dict) else v))

    def shown(v: object, depth: int = 0) -> object:   # (past 64 items or 4 levels a container is described)
        if isinstance(v, np.ndarray):
            return f"<numpy array [{', '.join(map(str, v.shape))}] {v.dtype.str[1:]}>"
        if isinstance(v, (list, tuple, dict)) and (len(v) > 64 or depth >= 4):
            return f"<{type(v).__name__} of {len(v):,} items>"
        if isinstance(v, (list, tuple)):
            return [shown(x, depth + 1) for x in v]
        return {k: shown(x, depth + 1) for k, x in v.items()} if isinstance(v, dict) else v

    def rec(o: object, name: str, depth: int) -> None:
        if depth < 8 and (isinstance(o, dict) and o or isinstance(o, (list, tuple)) and o and all(
                isinstance(x, (dict, list, tuple, torch.Tensor)) for x in o)):
            for k, v in o.items() if isinstance(o, dict) else enumerate(o):
                child = f"{name}.{k}" if name else str(k)
                if depth or not (v is None or isinstance(v, (dict, list, tuple)) and not v):
                    rec(v, child, depth + 1)
        elif not holds_tensor(o):
            out[name or file] = shown(o)

    if not (want is None or isinstance(want, (dict, list, tuple)) and not want):
        rec(_plain(want), "", 0)
    return json.loads(json.dumps(out))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_value_beside_the_tensors_is_listed(tmp_path, name):
    """Namespaces' attributes, configs' values, numpy scalars and arrays, and the plain values of nested dicts and lists
    (fairseq's `extra_state.best`, `optimizer_history.0.num_updates`) as torch.load gives them back."""
    path, _ = _save(tmp_path, name)
    _, want = _oracle(path)
    ckpt = open_checkpoint(path)
    expected = _values(want)
    assert expected and {k: o["value"] for k, o in ckpt.objects.items()} == expected


TRAINING_SAVES = sorted(str(p.relative_to(ROOT)) for p in pathlib.Path(ROOT, "fixtures").rglob("*")
                        if p.suffix in (".pt", ".pth", ".ckpt") and "optim_states" not in p.name
                        and "torch215" not in p.parts)   # (saved by a later torch than the test install's)


@pytest.mark.parametrize("rel", TRAINING_SAVES)
def test_every_value_of_the_libraries_saves_is_listed(rel):
    """The checkpoints Lightning, DeepSpeed, timm's and torchvision's training scripts, transformers and torch wrote
    for fixtures/ (their optimizers' param_groups, Lightning's loops, callbacks and schedulers, DeepSpeed's ds_config
    and param_shapes, timm's args): every value beside the tensors, as torch.load gives them back (the fixtures are
    this repository's own saves: loaded without weights_only). DeepSpeed's optimizer states name DeepSpeed's classes,
    read through their folder (tests/test_training.py)."""
    path = os.path.join(ROOT, rel)
    want = torch.load(path, weights_only=False, map_location="cpu")
    got = {k: o["value"] for k, o in open_checkpoint(path).objects.items()}
    assert got == _values(want, os.path.basename(path))


def test_shared_and_cyclic_values_are_bounded(tmp_path):
    """A dict shared through the memo is listed under each of its names, at most MAX_OBJECTS in all: a 26 KB pickle
    naming one empty dict through 1,000 keys at each of eight levels (10^24 names) lists 10,000 and stops; a dict
    holding itself is a value past the naming depth; a dict of tensors shared 100,000 times is walked once."""
    from ckptstat.formats.torch.values import MAX_OBJECTS

    shared: dict = {}
    for _ in range(8):
        shared = {f"k{i}": shared for i in range(1000)}
    cyclic: dict = {"lr": 0.1}
    cyclic["self"] = cyclic
    path = str(tmp_path / "bomb.pt")
    torch.save({"w": torch.ones(2), "bomb": shared, "cyclic": cyclic}, path)
    objects = open_checkpoint(path).objects
    assert len(objects) == MAX_OBJECTS and all(k.startswith("bomb.k0.") for k in objects)
    # a dict of 10,000 names of one tensor, named again by 100,000 items of a list (what the tensor walk's budget lets
    # a 480 KB pickle name): walked once, not 10^9 keys looked at
    t = torch.ones(2)
    names = {f"w{i}": t for i in range(10_000)}
    path = str(tmp_path / "shared.pt")
    torch.save({"many": [names] * 100_000, "lr": 0.5}, path)
    assert open_checkpoint(path).objects == {"lr": {"file": "shared.pt", "value": 0.5, "type": "float"}}
    path = str(tmp_path / "cycle.pt")
    torch.save({"w": torch.ones(2), "cyclic": cyclic}, path)
    objects = open_checkpoint(path).objects
    assert objects["cyclic.lr"]["value"] == 0.1 and objects["cyclic" + ".self" * 6 + ".lr"]["value"] == 0.1
    assert objects["cyclic" + ".self" * 7]["value"]["lr"] == 0.1


def test_numpy_arrays_are_values_not_tensors(tmp_path):
    path, obj = _save(tmp_path, "megatron")
    ckpt = open_checkpoint(path)
    state = obj["rng_state"][0]["np_rng_state"]
    assert not any("np_rng_state" in n for n in ckpt.tensors)
    assert ckpt.objects["rng_state.0.np_rng_state"]["value"][1] == f"<numpy array [{state[1].size}] u4>"
    assert any("numpy arrays are values, not tensors" in n for n in ckpt.notes)


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_pickle_protocols(tmp_path, protocol):
    """torch.save's pickle_protocol: bytes as BINBYTES from protocol 3, frames from 4 (which torch's weights_only
    unpickler does not read: torch.load(weights_only=False) is the oracle), numpy's arrays as _frombuffer from 5."""
    path, _ = _save(tmp_path, "scalars", protocol=protocol)
    unsafe = _globals_outside_allowlist(path)
    want = torch.load(path, weights_only=False)   # (the test's own file)
    ckpt = open_checkpoint(path)
    assert ckpt.objects["class_counts"]["value"] == "<numpy array [10] i4>"
    assert sorted(_tensors(want)) == sorted(ckpt.tensors)
    assert ckpt.metadata["torch_version"] == str(want["torch_version"])
    assert ckpt.metadata["out_dir"] == str(want["out_dir"])
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    assert sorted(_listed(note)) == sorted(unsafe)


def test_cli_summary_reads_it_and_says_what_it_did(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    path, _ = _save(tmp_path, "timm")
    rc, out, err = cli("summary", path)
    assert rc == 0 and not err, err
    assert "args.lr = 0.5" in out and "argparse.Namespace" in out and "safe_globals" in out
    rc, out, _ = cli("summary", path, "--json")
    r = json.loads(out)
    assert rc == 0 and r["objects"]["args.data_dir"]["value"] == "/data/imagenet"
    assert r["objects"]["args.mean"]["value"] == [0.485, 0.456, 0.406]


# ---------------------------------------------------------------------------------------------- refusals

def _zip(tmp_path, pkl: bytes) -> str:
    p = tmp_path / "f.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", pkl)
    return str(p)


class _Calls:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.parametrize("obj, glob", [
    ({"args": _Calls(print, ("hi",))}, "__builtin__.print"),   # (protocol 2 writes Python 2's module names)
    ({"cfg": _Calls(pathlib.Path.home, ())}, "pathlib.Path.home"),   # getattr(Path, 'home'), then called
    ({"x": _Calls(importlib.import_module, ("os",))}, "importlib.import_module"),
])
def test_a_call_of_any_other_global_is_refused_by_name(tmp_path, obj, glob):
    path = _zip(tmp_path, pickle.dumps(obj, protocol=2))
    with pytest.raises(UnsafeCheckpointError, match=f"global '{glob}'"):
        open_checkpoint(path)


class Act(enum.Enum):   # a user's enums, as structured configs type their fields
    GELU = 1
    RELU = 2


class Norm(str, enum.Enum):
    RMS = "rms"
    LAYER = "layer"


def _structured(monkeypatch, with_enum: bool):
    """A Hydra structured config: a dataclass of the user's module (`mylab.configs`, put in sys.modules while torch
    saves it), typed fields (List, Optional, Dict), and enum fields if asked (an int-valued one, a str mixin one set
    away from its default, an Optional one, a list of them)."""
    import dataclasses
    import sys
    import types
    from typing import Dict, List, Optional  # noqa: UP035 - as Hydra users write them (omegaconf keeps typing.List)

    fields = [("hidden", int, 4), ("layers", List[int], dataclasses.field(default_factory=lambda: [1, 2])),  # noqa: UP006
              ("name", Optional[str], None), ("extra", Dict[str, float], dataclasses.field(default_factory=dict))]  # noqa: UP006
    if with_enum:
        fields += [("act", Act, Act.GELU), ("norm", Norm, Norm.RMS), ("gate", Optional[Act], None),  # noqa: UP045
                   ("acts", List[Act], dataclasses.field(default_factory=lambda: [Act.RELU, Act.GELU]))]  # noqa: UP006
    model = dataclasses.make_dataclass("Model", fields)
    package, module = types.ModuleType("mylab"), types.ModuleType("mylab.configs")
    for cls in (model, Act, Norm):
        cls.__module__, cls.__qualname__ = "mylab.configs", cls.__name__
        setattr(module, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, "mylab", package)
    monkeypatch.setitem(sys.modules, "mylab.configs", module)
    return OmegaConf.structured(model)


def test_a_structured_configs_types_are_only_named(tmp_path, monkeypatch):
    """A structured config's metadata names the user's dataclass and typing's generics (torch lists them too): read,
    the values equal torch's load with every listed global allowed."""
    path = str(tmp_path / "s.pt")
    cfg = _structured(monkeypatch, with_enum=False)
    torch.save({"w": torch.ones(2), "hp": cfg}, path)
    unsafe, want = _oracle(path)
    assert "mylab.configs.Model" in unsafe and "typing.List" in unsafe
    import sys

    monkeypatch.delitem(sys.modules, "mylab.configs")   # nothing of the user's is importable when ckptstat reads
    ckpt = open_checkpoint(path)
    assert {k: o["value"] for k, o in ckpt.objects.items()} == _leaves("hp", _plain(want["hp"]))
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    assert sorted(_listed(note)) == sorted(unsafe)


def test_lightning_1x_callbacks_keyed_by_their_class(tmp_path, monkeypatch):
    """Lightning before 1.5 keyed `callbacks` by the callback's class (Stable Diffusion 1.x's .ckpt files hold
    `pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint` so): a global only named, never called, kept as its
    name; the tensors as torch gives them back with it allowed."""
    import sys
    import types

    class ModelCheckpoint:
        pass

    ModelCheckpoint.__module__, ModelCheckpoint.__qualname__ = "pytorch_lightning.callbacks.model_checkpoint", \
        "ModelCheckpoint"
    module = types.ModuleType(ModelCheckpoint.__module__)
    module.ModelCheckpoint = ModelCheckpoint   # type: ignore[attr-defined]
    for name in ("pytorch_lightning", "pytorch_lightning.callbacks"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, ModelCheckpoint.__module__, module)
    path = str(tmp_path / "sd.ckpt")
    torch.save({"epoch": 6, "global_step": 470000, "pytorch-lightning_version": "1.4.2",
                "state_dict": {f"model.{k}": v for k, v in _model().items()},
                "callbacks": {ModelCheckpoint: {"best_model_score": torch.tensor(0.25),
                                                "best_model_path": "/ckpt/epoch=6.ckpt"}}}, path)
    unsafe, want = _oracle(path)
    assert unsafe == ["pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint"]
    monkeypatch.delitem(sys.modules, ModelCheckpoint.__module__)
    ckpt = open_checkpoint(path)
    # a class key is named by its global's name
    want["callbacks"] = {f"{k.__module__}.{k.__qualname__}": v for k, v in want["callbacks"].items()}
    tensors = _tensors(want)
    assert sorted(ckpt.tensors) == sorted(tensors)
    for n, t in tensors.items():
        np.testing.assert_array_equal(ckpt.read(n).reshape(t.shape), t.numpy(), err_msg=n)
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    assert _listed(note) == unsafe and ckpt.training.get("global_step") == 470000


def test_a_structured_configs_enum_fields_are_read_as_members(tmp_path, monkeypatch):
    """An enum field's value (omegaconf's EnumNode) is pickled as a call of the user's class with the member's value:
    read, never called, as the member's value typed by its class, equal to torch's load with every listed global
    allowed; the user's module is not importable when ckptstat reads."""
    import sys

    path = str(tmp_path / "e.pt")
    cfg = _structured(monkeypatch, with_enum=True)
    cfg.norm = Norm.LAYER
    torch.save({"w": torch.ones(2), "hp": cfg}, path)
    unsafe, want = _oracle(path)
    assert {"mylab.configs.Act", "mylab.configs.Norm", "omegaconf.nodes.EnumNode"} <= set(unsafe)
    monkeypatch.delitem(sys.modules, "mylab.configs")
    ckpt = open_checkpoint(path)
    assert {k: o["value"] for k, o in ckpt.objects.items()} == _leaves("hp", _plain(want["hp"]))
    members = {k: type(v).__name__ for k, v in OmegaConf.to_container(want["hp"]).items() if isinstance(v, enum.Enum)}
    assert members and {k: ckpt.objects[f"hp.{k}"]["type"] for k in members} == members
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    assert sorted(_listed(note)) == sorted(unsafe)


def test_enum_calls_count_against_the_build_budget(tmp_path):
    """Seven bytes of pickle make a Member (and its entry until an EnumNode holds it): 300,000 of them, 2.1 MB, are
    refused by the budget on what a pickle builds instead of held (~80 MB), as any other copy bomb."""
    body = b"\x80\x02cmylab.configs\nAct\nq\x00]q\x01" + b"h\x00K\x01\x85Ra" * 300_000 + b"."
    with pytest.raises(CorruptCheckpointError, match="build more than"):
        open_checkpoint(_zip(tmp_path, body))


@pytest.mark.parametrize("where", ["a dict's value", "a list item", "a Namespace's attribute"])
def test_a_users_enum_outside_a_config_node_is_refused(tmp_path, monkeypatch, where):
    """The same call anywhere an EnumNode does not hold it is what it is, a call of the user's class: refused."""
    import sys
    import types

    module = types.ModuleType("mylab.configs")
    Act.__module__, module.Act = "mylab.configs", Act   # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mylab", types.ModuleType("mylab"))
    monkeypatch.setitem(sys.modules, "mylab.configs", module)
    value = {"a dict's value": {"act": Act.GELU}, "a list item": [Act.RELU],
             "a Namespace's attribute": argparse.Namespace(act=Act.GELU)}[where]
    path = str(tmp_path / "e.pt")
    torch.save({"w": torch.ones(2), "hp": value}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"global 'mylab\.configs\.Act'"):
        open_checkpoint(path)


@pytest.mark.parametrize("pkl, words", [
    # a numpy scalar whose bytes are not its dtype's size
    (b"\x80\x02cnumpy._core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00f8\x89\x88\x87R"
     b"C\x03abc\x86R.", "scalar of 3 bytes"),
    # a numpy array whose data is not its shape's size
    (b"\x80\x02cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R"
     b"(K\x01J\x00\x00\x00\x10\x85cnumpy\ndtype\nX\x02\x00\x00\x00f4\x89\x88\x87RK\x00C\x04abcdtb.", "bytes"),
    # a Namespace called with arguments, which pickle never writes
    (b"\x80\x02cargparse\nNamespace\nK\x01\x85R.", "REDUCE calls argparse.Namespace"),
    # a DictConfig given arguments to its NEWOBJ (copyreg.__newobj__ of a plain class gives none)
    (b"\x80\x02comegaconf.dictconfig\nDictConfig\n}\x85\x81.", "NEWOBJ of omegaconf.dictconfig.DictConfig with"),
    # a defaultdict whose factory is a function, not a type
    (b"\x80\x02ccollections\ndefaultdict\nctorch._utils\n_rebuild_tensor\n\x85R.", "defaultdict"),
])
def test_malformed_data_is_one_clear_error(tmp_path, pkl, words):
    path = _zip(tmp_path, pkl)
    with pytest.raises(CorruptCheckpointError, match=words):
        open_checkpoint(path)


def test_getattr_of_a_value_is_refused(tmp_path):
    """getattr composes a name from a global's name, never reaches into a value (attacks chain getattr over what a
    call returned: `getattr('', '__class__')`...)."""
    path = _zip(tmp_path, b"\x80\x02c__builtin__\ngetattr\nX\x00\x00\x00\x00X\t\x00\x00\x00__class__\x86R.")
    with pytest.raises(UnsafeCheckpointError, match=r"global 'builtins\.getattr'"):
        open_checkpoint(path)


def test_os_named_even_as_a_value_is_refused(tmp_path):
    """torch refuses sys, os, posix and nt whatever the user allows: so does the reader, called or not."""
    path = _zip(tmp_path, b"\x80\x02}X\x01\x00\x00\x00kcposix\nsystem\ns.")
    with pytest.raises(UnsafeCheckpointError, match=r"posix\.system"):
        open_checkpoint(path)


def test_numpy_text_scalars_read_and_datetimes_shown_unread(tmp_path):
    """numpy str_ scalars (UTF-32, any length, non-ASCII too) as `.item()` gives them; a datetime64 (its unit in the
    dtype's state) shown unread."""
    path = str(tmp_path / "s.pt")
    names = {"name": np.str_("abc"), "long": np.str_("ünïcødé " * 20), "one": np.str_("x")}
    torch.save({"w": torch.ones(1), **names, "when": np.datetime64("2026-01-01")}, path)
    ckpt = open_checkpoint(path)
    for k, v in names.items():
        assert ckpt.objects[k]["value"] == v.item(), k
    assert ckpt.objects["when"]["value"].startswith("<a numpy scalar of dtype M8")


@pytest.mark.parametrize("glob", ["argparse.Namespace", "builtins.dict", "typing.Any", "mylab.configs.Model"])
def test_a_bare_global_is_refused_and_one_kept_as_a_value_is_read(tmp_path, glob):
    """A pickle that is nothing but a global (a data class's or any other) holds nothing to read: refused, as torch
    refuses it. The same global as a dict's value, never called: kept as its name."""
    module, _, name = glob.rpartition(".")
    ref = b"c" + f"{module}\n{name}\n".encode()
    with pytest.raises(UnsafeCheckpointError, match=glob.replace(".", r"\.")):
        open_checkpoint(_zip(tmp_path, b"\x80\x02" + ref + b"."))
    (tmp_path / "v").mkdir()
    ckpt = open_checkpoint(_zip(tmp_path / "v", b"\x80\x02}X\x01\x00\x00\x00k" + ref + b"s."))
    assert not ckpt.tensors and any(glob in n for n in ckpt.notes)


def test_configs_copying_one_content_are_bounded(tmp_path):
    """A DictConfig copies its `_content` when built: one memoised dict of 20,000 keys given to 200,000 configs (4e9
    entries from a 3 MB pickle) is refused by the build budget, in one line, before memory runs out."""
    keys = b"".join(b"X" + len(k).to_bytes(4, "little") + k + b"N" for k in (f"k{i}".encode() for i in range(20_000)))
    content = b"}(" + keys + b"uq\x01"                                  # the content dict, memo 1
    one = b"h\x00)\x81}X\x08\x00\x00\x00_contenth\x01sb0"          # DictConfig(), BUILD {_content: memo 1}, POP
    pkl = b"\x80\x02comegaconf.dictconfig\nDictConfig\nq\x00" + content + b"0" + one * 200_000 + b"N."
    path = _zip(tmp_path, pkl)
    with pytest.raises(CorruptCheckpointError, match="build more than"):
        open_checkpoint(path)


def test_mmengine_message_hub(tmp_path):
    """An OpenMMLab 2.x (mmengine) Runner checkpoint keeps its MessageHub's state: HistoryBuffers of numpy arrays,
    whose statistics methods it pickles as getattr(HistoryBuffer, 'min'). Built by mmengine itself; read against
    torch.load(weights_only=True) with the listed globals allowed."""
    logging = pytest.importorskip("mmengine.logging")
    hub = logging.MessageHub.get_instance("ckptstat-test")
    for i in range(7):
        hub.update_scalar("train/loss", 1.0 / (i + 1))
        hub.update_scalar("train/lr", 0.01, count=2)
    hub.update_info("iter", 7)
    hub.update_info("epoch", 1)
    model = _model()
    optim = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.01)
    path = str(tmp_path / "epoch_1.pth")
    torch.save({"meta": {"epoch": 1, "iter": 7, "mmengine_version": "0.10.7", "seed": 42},
                "state_dict": model, "message_hub": hub.state_dict(), "optimizer": optim.state_dict(),
                "param_schedulers": [{"by_epoch": True, "last_step": 1, "_last_lr": [0.01]}]}, path)
    unsafe, want = _oracle(path)
    assert "mmengine.logging.history_buffer.HistoryBuffer" in unsafe and "builtins.getattr" in unsafe
    ckpt = open_checkpoint(path)
    tensors = _tensors(want)
    assert sorted(ckpt.tensors) == sorted(tensors)
    for n, t in tensors.items():
        np.testing.assert_array_equal(ckpt.read(n).reshape(t.shape), t.numpy(), err_msg=n)
    (note,) = [n for n in ckpt.notes if "outside torch's weights_only allowlist" in n]
    assert sorted(_listed(note)) == sorted(unsafe)
    for key, buf in want["message_hub"]["log_scalars"].items():
        shown = {k[len(f"message_hub.log_scalars.{key}."):]: o for k, o in ckpt.objects.items()
                 if k.startswith(f"message_hub.log_scalars.{key}.")}
        assert shown["max_length"]["value"] == buf.max_length and shown["max_length"]["type"] == "int"
        log, count = buf.data
        assert shown["_log_history"]["value"] == f"<numpy array [{log.size}] {log.dtype.str[1:]}>"
        assert shown["_count_history"]["value"] == f"<numpy array [{count.size}] {count.dtype.str[1:]}>"
        assert shown["statistics_methods.mean"]["value"] == "<mmengine.logging.history_buffer.HistoryBuffer.mean>"


def test_datetimes_read_as_torch_gives_them(tmp_path):
    """A save time (`datetime.now()`), a date, a time of day, a duration and time zones, as torch.load gives them
    back with the listed globals allowed: the ISO text (a duration and a zone: their str())."""
    import datetime as dt

    zone = dt.timezone(dt.timedelta(hours=-5, minutes=-30), "X")
    obj = {"w": torch.ones(1), "saved": dt.datetime(2026, 12, 6, 21, 0, 5, 123), "zoned": dt.datetime(2026, 1, 1, 8, tzinfo=zone),
           "utc": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "day": dt.date(2025, 5, 1),
           "at": dt.time(3, 4, 5, 6, tzinfo=zone), "took": dt.timedelta(days=1, seconds=3, microseconds=7)}
    path = str(tmp_path / "t.pt")
    torch.save({**obj, "run": {"start": obj["saved"], "elapsed": obj["took"]}}, path)
    unsafe, want = _oracle(path)
    ckpt = open_checkpoint(path)
    for k in ("saved", "zoned", "utc", "day", "at"):
        assert ckpt.metadata[k] == want[k].isoformat(), k
    assert sorted(_listed(next(n for n in ckpt.notes if "allowlist" in n))) == sorted(unsafe)
    stats = str(tmp_path / "s.pt")
    torch.save({"w": torch.ones(1), "args": argparse.Namespace(start=obj["saved"], took=obj["took"], tz=zone)}, stats)
    _, want = _oracle(stats)
    ckpt = open_checkpoint(stats)
    assert ckpt.objects["args.start"]["value"] == want["args"].start.isoformat()
    assert ckpt.objects["args.took"]["value"] == str(want["args"].took)
    assert ckpt.objects["args.tz"]["value"] == str(want["args"].tz)


@pytest.mark.parametrize("pkl, words", [
    # a datetime whose packed state says month 13 (datetime's own check)
    (b"\x80\x02cdatetime\ndatetime\nC\x0a\x07\xea\x0d\x01\x00\x00\x00\x00\x00\x00\x85R.",
     "datetime.datetime of a state it refuses"),
    # a timedelta of 10**20 days
    (b"\x80\x02cdatetime\ntimedelta\n\x8a\x09\x00\x00\x10\x63\x2d\x5e\xc7\x6b\x05K\x00K\x00\x87R.", "out of range"),
    # a datetime whose zone is a string
    (b"\x80\x02cdatetime\ndatetime\nC\x0a\x07\xea\x01\x01\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00Z\x86R.",
     "arguments its pickles never give"),
])
def test_malformed_datetimes_are_one_clear_error(tmp_path, pkl, words):
    with pytest.raises(CorruptCheckpointError, match=words):
        open_checkpoint(_zip(tmp_path, pkl))


def test_a_whole_pickled_model_is_refused_saying_what_it_is(tmp_path, capsys):
    """torch.save(model) pickles the model's classes, built by NEWOBJ: torch.load(weights_only=True) refuses it, and so
    does the reader, in one line saying it is a pickled object and that ckptstat reads a state_dict's tensors."""
    from ckptstat.cli import main

    path = str(tmp_path / "model.pt")
    torch.save({"model": torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert main(["summary", path]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "global 'torch.nn.modules.container.Sequential' (a pickled object" in err and "state_dict" in err


def test_mutated_data_pickles_read_or_give_one_error(tmp_path):
    """1,500 seeded mutants of the training-data fixture's data.pkl (bytes changed, cut, inserted; the zip rewritten
    so its CRC holds): each reads, or ends in a CkptstatError, never another exception (27,000 such mutants, and
    8,000 of the legacy file, ran clean when this landed)."""
    from conftest import fixture
    from zip_mutants import outcomes

    from ckptstat.analysis.summary import summarize

    seen = outcomes(fixture("torch", "training-data.pt"), lambda n: n.endswith("/data.pkl"), 1500, 36,
                    str(tmp_path / "m.pt"), lambda p: summarize(open_checkpoint(p)))
    assert set(seen) <= {"read", "CorruptCheckpointError", "UnsafeCheckpointError"} and len(seen) == 3, seen


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_numpy_scalars_of_every_dtype_are_their_numbers(tmp_path, legacy):
    """The unpickled object (formats/torch/containers.py) holds each numpy scalar as the number torch's load gives
    back (`.item()`): 14 dtypes, both byte orders numpy writes here."""
    from ckptstat.formats.torch.containers import read_legacy, read_zip

    path, _ = _save(tmp_path, "scalars", legacy)
    _, want = _oracle(path, _save(tmp_path / "zip", "scalars")[0] if legacy else None)
    got = (read_legacy if legacy else read_zip)(path).obj["stats"]
    assert set(got) == set(want["stats"])
    for k, v in want["stats"].items():
        assert got[k] == v.item() and type(got[k]) is type(v.item()), k
