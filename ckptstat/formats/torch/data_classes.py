"""Plain data that training scripts save beside their tensors under globals outside torch's weights_only allowlist,
and the value the torch reader makes of each without importing anything (docs/torch.md, "Training scripts' data").

torch.load(weights_only=True) refuses such a file, naming the global, and its error tells the user to name it in
`torch.serialization.safe_globals` (or `add_safe_globals`); torch then builds it as pickle would
(torch/_weights_only_unpickler.py: NEWOBJ `cls.__new__(cls, *args)`, BUILD `__setstate__` or `__dict__.update`,
REDUCE a call). The reader builds the plain value each holds instead, and nothing the pickle names is imported or
called:

- `argparse.Namespace` (timm's train.py `args`, fairseq before 0.10, Megatron-LM's `args`): NEWOBJ, then BUILD with
  its attributes: a dict of them (`Attributes`).
- omegaconf's `DictConfig` and `ListConfig` and their value nodes (omegaconf/base.py `Container.__getstate__`: NEWOBJ,
  then BUILD with the `__dict__`: `_content`, `_metadata`, `_parent`), the `ContainerMetadata` / `Metadata` they carry,
  the types those name (`typing.Any`, `builtins.dict`...) and the `collections.defaultdict(dict)` of their resolver
  cache (Lightning's `hyper_parameters` under Hydra, NeMo's `.ckpt`, fairseq's `cfg` from 0.10): a dict / list of the
  nodes' values. A structured config's metadata names the user's dataclass and `typing` generics only as types (the
  reader keeps any global named, never called, as an allowlist.Named); an enum value (EnumNode) is a call of the
  user's enum class with the member's value: read as a Member (its class's name and the value), never called, and
  only there.
- numpy scalars (`numpy._core.multiarray.scalar(dtype, bytes)`; numpy < 2 spells it `numpy.core`), with
  `numpy.dtype(code, align, copy)` and BUILD of its (version, byteorder, ...) state: the number.
- numpy arrays (`_reconstruct(numpy.ndarray, (0,), b'b')`, then BUILD `(1, shape, dtype, fortran, data)`; protocol
  5's `_frombuffer(buffer, dtype, shape, order)`): `np.random.get_state()` in Megatron's rng state, metric arrays: a
  `NumpyArray` (its shape and dtype), never one of the checkpoint's tensors (torch.load gives an ndarray, which
  `load_state_dict` refuses).
- `pathlib` paths (REDUCE of the class with its parts): the path's text.
- `torch.torch_version.TorchVersion` (`torch.__version__`, a str subclass: NEWOBJ with its text): the text.
- `datetime` moments (REDUCE of the class with its packed state, a `timezone` of a `timedelta`): the ISO text; a
  `timedelta` as `str()` gives it.
- mmengine's `HistoryBuffer` (an OpenMMLab 2.x Runner's `message_hub`: NEWOBJ, then BUILD with its attributes, numpy
  arrays) and the `getattr(HistoryBuffer, 'min')` its statistics methods pickle as: a dict of its attributes; getattr
  of a global's name gives the attribute's name (allowlist.Named), of anything else it is refused.
- what a transformers or TRL trainer's `training_args.bin` names (TRAINER_CLASSES): TrainingArguments and its
  subclasses (Seq2SeqTrainingArguments, TRL's SFTConfig, GRPOConfig...), AcceleratorConfig and accelerate's
  PartialState (NEWOBJ, then BUILD: their attributes), their enums (REDUCE with the member's value: a `Member`); a call
  of one of the objects is refused.
"""
from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ...core import dtypes
from .allowlist import Forbidden, Named, Refused

_NUMPY = ("numpy._core", "numpy.core")


class DataGlobal:
    """A global of the table: what NEWOBJ (`new`) or REDUCE (`call`) of it builds; neither for a type the pickle only
    names as a value (omegaconf's metadata: `typing.Any`, `builtins.dict`)."""

    def __init__(self, name: str, new: Callable[..., Any] | None = None, call: Callable[..., Any] | None = None,
                 new_args: bool = False):
        self.name, self.new, self.call, self.new_args = name, new, call, new_args

    def __call__(self, *args: Any) -> Any:   # REDUCE
        if self.call is None:
            raise Refused(f"REDUCE calls {self.name}, which its pickles never call")
        return self.call(*args)

    def built(self, args: tuple[Any, ...]) -> Any:   # NEWOBJ
        if self.new is None:
            raise Refused(f"NEWOBJ builds {self.name}, which its pickles never build")
        if args and not self.new_args:   # copyreg.__newobj__ of a plain class: no arguments
            raise Refused(f"NEWOBJ of {self.name} with arguments, which its pickles never give")
        return self.new(*args)


class Filled:
    """What NEWOBJ built, given its state by BUILD."""

    def build(self, state: Any) -> None:
        raise NotImplementedError


def _dict_state(state: Any, what: str) -> dict[Any, Any]:
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):   # (__dict__, slots)
        state = state[0]
    if not isinstance(state, dict):
        raise Refused(f"BUILD gives {what} a {type(state).__name__}, not its attributes")
    return state


class Attributes(dict[Any, Any], Filled):
    """An object of a plain class (an argparse.Namespace, mmengine's HistoryBuffer): its attributes. `shown`: the
    class's name."""

    def __init__(self, shown: str):
        super().__init__()
        self.shown = shown

    def build(self, state: Any) -> None:
        self.update(_dict_state(state, f"a {self.shown}"))




class _Node(Filled):
    """An omegaconf value node (AnyNode, IntegerNode...): `_val`; a UnionNode: the node in its `_content`."""

    def __init__(self) -> None:
        self.value: Any = None

    def build(self, state: Any) -> None:
        state = _dict_state(state, "an omegaconf node")
        self.value = state["_val"] if "_val" in state else _value(state.get("_content"))


def _value(v: Any) -> Any:
    return v.value if isinstance(v, _Node) else v


class Config(dict[Any, Any], Filled):
    """An omegaconf DictConfig: its keys and their values. A config that is None, missing (`???`) or an
    interpolation (`${...}`) holds that in `_content` instead of a dict: kept as `content`."""
    shown = "DictConfig"
    content: Any = None

    def build(self, state: Any) -> None:
        content = _dict_state(state, "an omegaconf DictConfig").get("_content")
        if isinstance(content, dict):
            self.update({k: _value(v) for k, v in content.items()})
        else:
            self.content = content


class ConfigList(list[Any], Filled):
    """An omegaconf ListConfig: its items' values."""
    shown = "ListConfig"
    content: Any = None

    def build(self, state: Any) -> None:
        content = _dict_state(state, "an omegaconf ListConfig").get("_content")
        if isinstance(content, list):
            self.extend(_value(v) for v in content)
        else:
            self.content = content


class _Ignored(Filled):
    """omegaconf's metadata: which types a node holds, its flags; nothing a reader of the values needs."""

    def build(self, state: Any) -> None:
        pass


@dataclass(frozen=True)
class Unread:
    """A value of a known class whose contents the reader does not decode (a numpy string scalar)."""
    what: str


class NumpyDType(Filled):
    """numpy.dtype(code, align, copy); BUILD gives its (version, byteorder, ...) state. (Plain numpy pickles' arrays
    use it too: formats/numpy_pickle.py.)"""

    def __init__(self, code: Any, *args: Any) -> None:
        if not isinstance(code, str):
            raise Refused(f"numpy.dtype of a {type(code).__name__}, not a type code")
        self.code, self.order = code[:32], "|"

    def build(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.order = state[1]

    def known(self) -> str | None:
        """The canonical dtype, when ckptstat reads this one."""
        return dtypes.NUMPY_CODES.get(self.code)


_TEXT_CODE = re.compile(r"[US][1-9][0-9]{0,5}")   # numpy's str_ (UTF-32) and bytes_ scalars of a fixed length


def _scalar(dtype: Any, data: Any = None) -> Any:
    """numpy's scalar(dtype, bytes): the number, or a str_ / bytes_ scalar's text or bytes (as `.item()` gives
    them); any other dtype (a datetime64, whose unit its state holds) unread."""
    if not isinstance(dtype, NumpyDType):
        raise Refused(f"a numpy scalar of a {type(dtype).__name__}, not a numpy.dtype")
    if dtype.known() is None and not _TEXT_CODE.fullmatch(dtype.code):
        return Unread(f"a numpy scalar of dtype {dtype.code}")
    import numpy as np
    dt = np.dtype(dtype.code).newbyteorder(">" if dtype.order == ">" else "<")
    if not isinstance(data, (bytes, bytearray)) or len(data) != dt.itemsize:
        raise Refused(f"a numpy {dtype.code} scalar of {len(data) if isinstance(data, (bytes, bytearray)) else 0} "
                      f"bytes, not {dt.itemsize}")
    return np.frombuffer(bytes(data), dt)[0].item()


class NumpyArray(Filled):
    """A numpy array's shape and dtype (its bytes, already in the pickle, are not kept): a value, not a tensor."""

    def __init__(self, *args: Any) -> None:
        self.shape: tuple[int, ...] = ()
        self.dtype = ""

    def build(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise Refused("a numpy array's state is not (version, shape, dtype, fortran, data)")
        self.fill(state[1], state[2], state[4])

    def fill(self, shape: Any, dtype: Any, data: Any) -> None:
        if not (isinstance(shape, tuple) and len(shape) <= 64 and all(type(d) is int and d >= 0 for d in shape)):
            raise Refused(f"a numpy array of shape {str(shape)[:64]}")
        if not isinstance(dtype, NumpyDType):
            raise Refused(f"a numpy array of a {type(dtype).__name__}, not a numpy.dtype")
        self.shape, self.dtype = shape, dtype.code
        known = dtype.known()
        if known is not None and isinstance(data, (bytes, bytearray)) and \
                len(data) != dtypes.get(known).nbytes(math.prod(shape)):
            raise Refused(f"a numpy array {list(shape)} {dtype.code} of {len(data):,} bytes")

    def __repr__(self) -> str:
        return f"numpy array {list(self.shape)} {self.dtype}"


def _frombuffer(buffer: Any = b"", dtype: Any = None, shape: Any = (), order: Any = "C") -> NumpyArray:
    a = NumpyArray()
    a.fill(shape, dtype, buffer)
    return a


def _path(windows: bool) -> Callable[..., str]:
    """A pathlib class's REDUCE with its parts (one, its text, from Python 3.12): the path's text."""
    def build(*parts: Any) -> str:
        if not all(isinstance(p, str) for p in parts):
            raise Refused("a pathlib path of parts that are not text")
        return str((PureWindowsPath if windows else PurePosixPath)(*parts))
    return build


def _text(value: Any = "") -> str:
    if not isinstance(value, str):
        raise Refused(f"torch.torch_version.TorchVersion of a {type(value).__name__}")
    return str(value)


def _getattr(owner: Any, name: Any = None, *default: Any) -> Named:
    """getattr(class, name) of a global the pickle only names (mmengine's HistoryBuffer keeps its statistics methods
    so): the attribute's name, inert as its owner; calling it is refused as calling any other global."""
    if not isinstance(owner, (Named, DataGlobal)) or not isinstance(name, str) or default:
        raise Forbidden("builtins.getattr")   # of a value (what attacks chain: getattr(__import__(...), ...))
    return Named(f"{owner.name}.{name}"[:256])


def _moment(kind: type[datetime.date] | type[datetime.time]) -> Callable[..., str]:
    """datetime.datetime / date / time: REDUCE of the class with its packed state (pickle's own constructor form,
    checked by the class: its length, each field's range) and a timezone: the ISO text."""
    ctor: Callable[..., datetime.date | datetime.time] = kind   # (typeshed lacks pickle's constructor form)

    def build(state: Any = None, tz: Any = None, *rest: Any) -> str:
        if not isinstance(state, bytes) or rest or not (tz is None or isinstance(tz, datetime.timezone)):
            raise Refused(f"datetime.{kind.__name__} of arguments its pickles never give")
        try:
            return (ctor(state) if tz is None else ctor(state, tz)).isoformat()
        except (TypeError, ValueError) as e:
            raise Refused(f"datetime.{kind.__name__} of a state it refuses: {e}") from None
    return build


def _timedelta(days: Any = 0, seconds: Any = 0, microseconds: Any = 0) -> datetime.timedelta:
    if not all(type(v) is int for v in (days, seconds, microseconds)):
        raise Refused("datetime.timedelta of values that are not integers")
    try:
        return datetime.timedelta(days, seconds, microseconds)
    except OverflowError as e:
        raise Refused(f"datetime.timedelta out of range: {e}") from None


def _timezone(offset: Any = None, name: Any = None) -> datetime.timezone:
    if not isinstance(offset, datetime.timedelta) or not (name is None or isinstance(name, str)):
        raise Refused("datetime.timezone of arguments its pickles never give")
    try:
        return datetime.timezone(offset) if name is None else datetime.timezone(offset, name)
    except ValueError as e:
        raise Refused(f"datetime.timezone: {e}") from None


def _defaultdict(factory: Any = None, *args: Any) -> dict[Any, Any]:
    """collections.defaultdict(factory): omegaconf's resolver cache, `defaultdict(dict)`; its items follow."""
    if factory is not None and not (isinstance(factory, DataGlobal) and factory.new is None and factory.call is None):
        raise Refused("collections.defaultdict of a factory that is not a type")
    return {}


_OMEGACONF_NODES = ("nodes.AnyNode", "nodes.IntegerNode", "nodes.FloatNode", "nodes.StringNode", "nodes.BooleanNode",
                    "nodes.BytesNode", "nodes.PathNode", "nodes.NoneNode", "nodes.EnumNode", "nodes.LiteralNode",
                    "nodes.InterpolationResultNode", "base.UnionNode")
_TYPES = ("typing.Any", *(f"builtins.{t}" for t in ("dict", "list", "tuple", "str", "int", "float", "bool",
                                                      "bytes", "object")), "numpy.ndarray")

# The classes a transformers or TRL trainer's training_args.bin names (TrainingArguments and TRL's configs, their enums,
# accelerate's state), plain data only as pickle rebuilds them: an "object" built without a call (NEWOBJ, then BUILD:
# its attributes), an "enum" looked up by one value (REDUCE: a Member) (formats/trainer_classes.json, written from
# transformers, accelerate and trl by fixtures/make_trainer_classes.py).
def _generated(name: str) -> Any:
    """A table of formats/ that a fixtures/make_*.py script wrote: its "classes"."""
    return json.loads((Path(__file__).parent.parent / name).read_text(encoding="utf-8"))["classes"]


TRAINER_CLASSES: dict[str, str] = _generated("trainer_classes.json")


# The callback classes PyTorch Lightning 1.0 to 1.4 key a checkpoint's `callbacks` dict by (`{ModelCheckpoint: state}`:
# Stable Diffusion 1.x's .ckpt files), only named, never called (formats/lightning_callbacks.json, read from those
# releases' wheels by fixtures/make_lightning_callbacks.py). Plain data for scan only where every reference is a dict's
# key (pickle_machine.Machine.keyed).
CALLBACK_KEYS: frozenset[str] = frozenset(_generated("lightning_callbacks.json"))


@dataclass(frozen=True)
class Member:
    """An Enum member, pickled as `cls(value)`: its class's name and its value."""
    shown: str
    value: Any

    @classmethod
    def of(cls, enum: str, value: Any) -> Member:
        """The member of the Enum class `enum` (its qualified name) whose value is `value`."""
        return cls(enum.rpartition(".")[2], value)


MEMBER_VALUE = (str, int, float, bool, type(None))   # what an Enum member's value is in the configs read here


def _member(name: str) -> Callable[..., Member]:
    def build(*args: Any) -> Member:
        if len(args) != 1 or not isinstance(args[0], MEMBER_VALUE):
            raise Refused(f"{name} called with {len(args)} argument(s), not a member's one plain value")
        return Member.of(name, args[0])
    return build


class EnumNode(_Node):
    """omegaconf's EnumNode: its `_val` a member of the user's Enum, which pickle rebuilds by calling the user's class
    with the member's value (`Act("gelu")`). The unpickler reads that call as a Member only where an EnumNode holds it
    (unpickler.SafeUnpickler.members); anywhere else it is refused as the call it is."""


TABLE: dict[str, DataGlobal] = {g.name: g for g in (
    DataGlobal("argparse.Namespace", new=lambda: Attributes("Namespace")),
    DataGlobal("mmengine.logging.history_buffer.HistoryBuffer", new=lambda: Attributes("HistoryBuffer")),
    DataGlobal("builtins.getattr", call=_getattr),
    DataGlobal("omegaconf.dictconfig.DictConfig", new=Config),
    DataGlobal("omegaconf.listconfig.ListConfig", new=ConfigList),
    *(DataGlobal(f"omegaconf.{n}", new=EnumNode if n == "nodes.EnumNode" else _Node) for n in _OMEGACONF_NODES),
    DataGlobal("omegaconf.base.ContainerMetadata", new=_Ignored),
    DataGlobal("omegaconf.base.Metadata", new=_Ignored),
    DataGlobal("collections.defaultdict", call=_defaultdict),
    *(DataGlobal(t) for t in _TYPES),
    DataGlobal("numpy.dtype", call=NumpyDType),
    *(DataGlobal(f"{m}.multiarray.scalar", call=_scalar) for m in _NUMPY),
    *(DataGlobal(f"{m}.multiarray._reconstruct", call=NumpyArray) for m in _NUMPY),
    *(DataGlobal(f"{m}.numeric._frombuffer", call=_frombuffer) for m in _NUMPY),
    *(DataGlobal(f"{m}.{c}", call=_path("Windows" in c)) for m in ("pathlib", "pathlib._local")
      for c in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
    DataGlobal("torch.torch_version.TorchVersion", new=_text, new_args=True),
    *(DataGlobal(f"datetime.{k.__name__}", call=_moment(k)) for k in (datetime.datetime, datetime.date, datetime.time)),
    DataGlobal("datetime.timedelta", call=_timedelta),
    DataGlobal("datetime.timezone", call=_timezone),
    *(DataGlobal(n, new=lambda n=n: Attributes(n.rpartition(".")[2])) if kind == "object" else
      DataGlobal(n, call=_member(n)) for n, kind in TRAINER_CLASSES.items()),
)}

# What `ckptstat scan` calls plain data: the table's globals but getattr (and the trainer's), under any loader
# (pickle.load, torch.load without weights_only). Each is a stdlib, numpy, omegaconf, mmengine or torch class or
# constructor that, called or built with whatever arguments and state a pickle gives it, makes a value and runs no code
# of the file's choosing (a Namespace's attributes, a config's nodes, a number, a path, a moment, an array); a type only
# named is a value.
# `builtins.getattr` is how a pickle reaches any callable (`getattr(module_object, "system")`): a finding, always.
PLAIN_DATA: frozenset[str] = frozenset(TABLE) - {"builtins.getattr"} - set(TRAINER_CLASSES)
# The types the table holds only as names (omegaconf's metadata: `builtins.dict`, `typing.Any`...): plain data while
# named; called or built with arguments they run the arguments' own methods (dict(cfg) and list(cfg) read a config's
# values, resolving its interpolations with the loading process's resolvers), so scan judges that a finding.
NAMED_ONLY: frozenset[str] = frozenset(n for n, g in TABLE.items() if g.new is None and g.call is None)


def data_note(met: frozenset[str]) -> str:
    """What the reader says of a pickle that named the globals `met`, outside torch's allowlist."""
    arrays = any(g.endswith(("._reconstruct", "._frombuffer")) for g in met)
    return (f"the pickle names {len(met)} global(s) outside torch's weights_only allowlist, none imported or called "
            f"(training scripts' plain data built as values, any other kept as its name): {', '.join(sorted(met))}; "
            "torch.load(weights_only=True) refuses the file unless they are named in torch.serialization.safe_globals"
            + ("; numpy arrays are values, not tensors" if arrays else "") + " (`ckptstat scan` judges it)")
