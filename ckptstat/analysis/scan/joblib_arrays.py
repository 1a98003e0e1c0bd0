"""joblib's NumpyUnpickler (joblib/numpy_pickle.py `load_build`), modelled for `ckptstat scan`: the arrays joblib.dump
writes inline, and the files joblib < 0.10's wrappers name.

joblib.dump pickles each ndarray as a NumpyArrayWrapper (subclass, shape, order, dtype, allow_mmap,
numpy_array_alignment_bytes) and writes the array's bytes into the stream right after the wrapper's BUILD. At that BUILD
joblib.load's unpickler pops the wrapper and reads the array from the stream: one padding-length byte and that many
bytes (where the wrapper has an alignment), then `prod(shape) * dtype.itemsize` bytes; an array whose dtype holds
objects is a whole nested pickle instead (read by a fresh pickle Unpickler through the same find_class: its globals
are imported as any). The pickle goes on after them. So does the walk: `JoblibArrays` is the walk's `Builds`
(formats/torch/pickle_machine.py), which keeps the wrapper's attributes and the dtype (rebuilt with numpy from the
descr and state the pickle holds, as numpy's own unpickling does, never from anything else) and skips or walks
exactly what joblib reads. Where the walk cannot tell (an attribute it did not keep, a frame that runs past the
wrapper, a BUILD of an object it cannot tell from a wrapper) the rest is unknown, never guessed.

joblib < 0.10 wrote each array to a file of its own beside the pickle; its NDArrayWrapper (and ZNDArrayWrapper)
names the file, and joblib.load still reads it: `np.load(os.path.join(folder, filename), allow_pickle=True)`, so a
name outside the pickle's folder (absolute, or through `..`) makes joblib.load unpickle a file the pickle chose
(measured: tests/test_scan_joblib.py): a finding; a name beside it is unknown (scan the folder: it lists that file).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

from ...formats.torch.allowlist import allowed_name
from ...formats.torch.pickle_machine import (
    UNKNOWN,
    Fail,
    Finding,
    Global,
    Incomplete,
    Machine,
    Opaque,
    TrackedDict,
    Walk,
)
from ...formats.torch.pickle_walk import walk
from ...formats.torch.streams import FileWindow, Source
from .torch_load import Trace, report

# The names under which joblib 1.6's modules (and scikit-learn < 0.23's vendored copy, sklearn.externals.joblib) hold
# its wrapper classes: importing them runs nothing of the file's choosing.
_MODULES = ("joblib.numpy_pickle", "sklearn.externals.joblib.numpy_pickle")
INLINE = frozenset(f"{m}.NumpyArrayWrapper" for m in _MODULES)
COMPAT = frozenset(f"{m}.{c}" for m in (*_MODULES, "joblib.numpy_pickle_compat", "sklearn.externals.joblib."
                                        "numpy_pickle_compat") for c in ("NDArrayWrapper", "ZNDArrayWrapper"))
JOBLIB_OWN = INLINE | COMPAT
# numpy's calls whose result is never a wrapper, whatever their arguments (an ndarray, a scalar)
_NUMPY_MADE = {**{f"{m}.multiarray._reconstruct": "numpy.ndarray" for m in ("numpy.core", "numpy._core")},
               **{f"{m}.numeric._frombuffer": "numpy.ndarray" for m in ("numpy.core", "numpy._core")},
               **{f"{m}.multiarray.scalar": "numpy scalar" for m in ("numpy.core", "numpy._core")}}   # ARRAY, SCALAR
MAX_DESCR = 256       # a dtype descr string numpy is asked to read (numpy's own are a few characters)
LOADER = "joblib.load"


@dataclass(eq=False)
class Wrapper:
    """A joblib array wrapper the pickle made: its attributes, as far as the walk knows them (None: not known)."""
    name: str
    attrs: dict[str, object] | None = field(default_factory=dict)


@dataclass(eq=False)
class DType:
    """A numpy.dtype the pickle made (mutable: BUILD sets its state in place); `dtype` None where it is not known."""
    dtype: Any


@dataclass(frozen=True)
class Instance:
    """An object a call of `of` made, taken for no wrapper: `of` is accepted and its arguments held nothing to call
    or return (else the result is UNKNOWN), or `of` is outside the accepted globals (a finding already)."""
    of: str


ARRAY = Instance("numpy.ndarray")
SCALAR = Instance("numpy scalar")
_CONTAINERS = frozenset({"list", "tuple", "dict", "set", "frozenset"})   # opaque: their items were not kept


def _may_hold_a_callable(v: object, depth: int = 0) -> bool:
    """Whether a call's arguments may hand it something to call or to return: a global, a wrapper, an object a call
    made (but numpy's arrays and scalars), an unknown value, a container whose items were not kept."""
    if isinstance(v, (Global, Wrapper)) or v is UNKNOWN or depth > 8 or isinstance(v, Instance) and \
            v not in (ARRAY, SCALAR) or isinstance(v, Opaque) and v.kind in _CONTAINERS:
        return True
    if isinstance(v, (tuple, list)):
        return any(_may_hold_a_callable(x, depth + 1) for x in v)
    if isinstance(v, TrackedDict):
        return not v.exact or any(_may_hold_a_callable(x, depth + 1) for x in v.values())
    return False


def _may_set_class(state: object) -> bool:
    """Whether pickle's load_build may setattr `__class__` with this state (its (dict, slotstate) form), turning the
    object into a wrapper or a wrapper into another class."""
    if state is UNKNOWN:
        return True
    if not (isinstance(state, tuple) and len(state) == 2) or state[1] is None:
        return False
    slots = state[1]
    return not (isinstance(slots, TrackedDict) and slots.exact and "__class__" not in slots)


def _real(v: object, depth: int = 0) -> object:
    """A dtype state's value as numpy's __setstate__ takes it (DType values made numpy dtypes), or raise ValueError
    where the walk does not know it exactly."""
    if depth > 32:
        raise ValueError("nested too deep")
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, DType) and v.dtype is not None:
        return v.dtype
    if isinstance(v, tuple):
        return tuple(_real(x, depth + 1) for x in v)
    if isinstance(v, TrackedDict) and v.exact:
        return {_real(k, depth + 1): _real(x, depth + 1) for k, x in v.items()}
    raise ValueError("a value scan did not keep")


def _dtype(args: object) -> DType:
    """numpy.dtype(descr, align, copy) as the pickle calls it (numpy's dtype.__reduce__ writes a descr string):
    rebuilt by numpy itself, always as a copy (never numpy's shared builtin dtypes, which a state would change)."""
    import numpy as np

    if not (isinstance(args, tuple) and 1 <= len(args) <= 3 and isinstance(args[0], str) and len(args[0]) <= MAX_DESCR
            and all(isinstance(a, (bool, int)) for a in args[1:])):
        return DType(None)
    try:
        return DType(np.dtype(args[0], bool(args[1]) if len(args) > 1 else False, True))
    except Exception:  # noqa: BLE001 - numpy refuses the descr: joblib.load's numpy may too; not known
        return DType(None)


def _set_state(d: DType, state: object) -> None:
    if d.dtype is None:
        return
    try:
        d.dtype.__setstate__(_real(state))
    except Exception:  # noqa: BLE001 - a state numpy refuses or scan did not keep: the dtype is no longer known
        d.dtype = None


class JoblibArrays:
    """The walk's `Builds` for joblib.load (see the module doc); `inline`: NumpyUnpickler (joblib.load of a plain or
    compressed file) reads inline arrays; False for joblib < 0.10's ZipNumpyUnpickler ('ZF' files), which reads
    only the compat wrappers' files. Nested pickles walked are kept in `nested` (the trace reaches them).

    An object a global outside the accepted ones (torch's allowlist, joblib's and `numpy_own`) made is already a
    finding: the file is unsafe whatever that object is, so the walk takes it for no wrapper and goes on (naming what
    follows) rather than stopping; only what accepted calls make must be told from a wrapper."""

    def __init__(self, record: str, numpy_own: frozenset[str], inline: bool = True):
        self.record, self.inline, self.own = record, inline, JOBLIB_OWN | numpy_own
        self.nested: list[Walk] = []
        self.arrays = 0
        self.beside: list[str] = []      # compat files named beside the pickle

    def accepted(self, name: str) -> bool:
        return name in self.own or allowed_name(name)

    def made(self, m: Machine, fn: object, args: object, init: bool) -> object:
        if isinstance(fn, Instance) and not self.accepted(fn.of):
            return Instance(fn.of)       # what an object made by a finding returns: the file is unsafe already
        if not isinstance(fn, Global):
            return UNKNOWN
        if fn.name in JOBLIB_OWN:
            return Wrapper(fn.name, _init_attrs(fn.name, args) if init else {})
        if fn.name == "numpy.dtype":
            return _dtype(args)
        if fn.name in _NUMPY_MADE:
            return Instance(_NUMPY_MADE[fn.name])
        return UNKNOWN if self.accepted(fn.name) and _may_hold_a_callable(args) else Instance(fn.name)

    def built(self, m: Machine, obj: object, state: object) -> object:
        if isinstance(obj, Instance) and not self.accepted(obj.of):
            return obj                   # (its class' own __setstate__, whatever the state: a finding already)
        wrappers = any(n in JOBLIB_OWN for n in m.w.globals)
        if wrappers and _may_set_class(state):
            raise Incomplete("a BUILD whose slot state may set __class__ (making a joblib array wrapper of the object, "
                             "or another class of a wrapper)")
        if isinstance(obj, DType):
            _set_state(obj, state)
            return obj
        if isinstance(obj, Wrapper):
            _set_attrs(obj, state)
            if obj.name in INLINE and not self.inline:
                return obj
            return self._read(m, obj)
        if obj is UNKNOWN and wrappers:
            raise Incomplete("a BUILD of an object scan cannot tell from a joblib array wrapper (joblib.load reads the "
                             "array's bytes after a wrapper's BUILD)")
        return obj

    # --- what joblib reads at a wrapper's BUILD
    def _read(self, m: Machine, w: Wrapper) -> object:
        if w.attrs is None:
            raise Incomplete(f"a {w.name} whose attributes scan did not keep")
        if w.name in COMPAT:
            return self._compat(m, w.attrs)
        if m.buf_end is not None and m.src.pos < m.buf_end:
            raise Incomplete("a FRAME runs past a NumpyArrayWrapper's BUILD (joblib reads the array after the frame, "
                             "the pickle's next opcodes from within it)")
        m.buf_end = None
        dtype, shape = w.attrs.get("dtype"), w.attrs.get("shape")
        if not isinstance(shape, (tuple, list)) or not all(type(n) is int for n in shape):
            raise Incomplete("a NumpyArrayWrapper whose shape is not a tuple of ints")
        if not isinstance(dtype, DType) or dtype.dtype is None:
            raise Incomplete("a NumpyArrayWrapper whose dtype scan cannot rebuild")
        self.arrays += 1
        if dtype.dtype.hasobject:     # a nested pickle, read by pickle's Unpickler through joblib's find_class
            at = None if m.w.start is None else m.w.start + m.src.pos
            inner = walk(m.src, f"{self.record}: object array {self.arrays}", at)
            self.nested.append(inner)
            if inner.unknown:
                raise Incomplete(f"the object array's pickle: {inner.unknown}")
            if inner.failure:
                raise Fail(f"the object array's pickle: {inner.failure}")
            return ARRAY
        count = 1
        for n in shape:
            count *= n
        itemsize = dtype.dtype.itemsize
        if count < 0 or itemsize <= 0 or count > (1 << 63) - 1:
            raise Incomplete(f"a NumpyArrayWrapper of shape {tuple(shape)} and itemsize {itemsize}")
        align = w.attrs.get("numpy_array_alignment_bytes", None)
        if isinstance(align, Instance) or align is UNKNOWN:
            raise Incomplete("a NumpyArrayWrapper whose alignment scan cannot tell from None")
        if align is not None:      # (absent: joblib < 1.2 wrote no padding)
            pad = m.src.read(1)[0] if m.src.left() else 0    # (joblib reads the padding without checking its length)
            m.src.skip(min(pad, m.src.left()))
        m.src.skip(count * itemsize)
        return ARRAY

    def _compat(self, m: Machine, attrs: dict[str, object]) -> object:
        name = attrs.get("filename")
        if not isinstance(name, str):
            raise Incomplete("a joblib < 0.10 array wrapper whose filename scan did not keep")
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ":" in name or ".." in parts:   # (a POSIX or a Windows loader's join)
            m.w.findings.append(Finding(m.op_at, "BUILD", f"<joblib array file {name!r}>",
                                        "joblib.load reads this array with np.load(allow_pickle=True) from a file "
                                        "outside the pickle's folder, which the pickle names"))
        else:
            self.beside.append(name)
        return ARRAY


def _init_attrs(name: str, args: object) -> dict[str, object] | None:
    """A wrapper's attributes after its __init__ (NumpyArrayWrapper(subclass, shape, order, dtype, allow_mmap=False,
    numpy_array_alignment_bytes=16); NDArrayWrapper(filename, subclass, allow_mmap=True))."""
    if not isinstance(args, tuple):
        return None
    keys = ("subclass", "shape", "order", "dtype", "allow_mmap", "numpy_array_alignment_bytes") if name in INLINE \
        else ("filename", "subclass", "allow_mmap")
    if name in INLINE and not 4 <= len(args) <= 6 or name in COMPAT and len(args) > 3:
        return None      # joblib raises (TypeError) or a subclass' __init__ scan does not model
    attrs: dict[str, object] = {"numpy_array_alignment_bytes": 16} if name in INLINE else {}
    attrs.update(zip(keys, args))
    return attrs


def _set_attrs(w: Wrapper, state: object) -> None:
    """pickle's load_build on an object without __setstate__: a dict's items into its __dict__, a (dict, slots)
    pair's second dict by setattr."""
    if w.attrs is None:
        return
    parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
    for part in parts:
        if part is None or isinstance(part, TrackedDict) and part.exact and not part:
            continue
        if not isinstance(part, TrackedDict) or not part.exact or not all(isinstance(k, str) for k in part):
            w.attrs = None
            return
        w.attrs.update((str(k), v) for k, v in part.items())


def walk_joblib(src: Source, record: str, start: int | None, numpy_own: frozenset[str],
                inline: bool = True) -> tuple[Walk, JoblibArrays]:
    """One joblib pickle walked from `src` as joblib.load reads it (see the module doc)."""
    arrays = JoblibArrays(record, numpy_own, inline)
    return walk(src, record, start, builds=arrays), arrays


def accept_own(w: Walk, numpy_own: frozenset[str]) -> None:
    """joblib's wrappers and numpy's own reconstruction (`numpy_own`), accepted beside torch's allowlist: importing
    them runs nothing of the file's choosing."""
    w.accept(JOBLIB_OWN | numpy_own)


def reach(t: Trace, w: Walk, arrays: JoblibArrays, numpy_own: frozenset[str]) -> None:
    """The joblib pickle `w` and the object arrays' pickles it read into the trace `t`, judged as joblib.load runs
    them; the files joblib < 0.10's wrappers name beside it unknown."""
    for x in (w, *arrays.nested):
        accept_own(x, numpy_own)
        t.reach(x)
    t.unknown += [f"joblib.load reads an array from {n!r} beside this file with np.load(allow_pickle=True) (joblib < "
                  "0.10's layout): scan that file too (a folder scan lists it)" for n in arrays.beside]
    if arrays.arrays:
        t.notes.append(f"{arrays.arrays} array(s) joblib wrote inline after their wrappers, read past as joblib.load "
                       "reads them")



def safe_verdict(loader: str) -> str:
    return (f"safe: every global {loader} would import is joblib's array wrapper, numpy's own reconstruction or in "
            "torch's weights_only allowlist")


def judge_plain(path: str, f: IO[bytes], size: int, traced: Trace, numpy_own: frozenset[str]) -> dict[str, Any] | None:
    """The report of an uncompressed joblib pickle (joblib.dump's default), or None when `traced` (torch.load's trace
    of the file) walked no pickle at byte 0 that imports a joblib array wrapper. joblib.load unpickles the file from
    byte 0, reading the arrays after their wrappers; torch.load reads those bytes as opcodes and raises there (or,
    in a file made to, runs them). The trace's own globals are accepted in `traced` too (accept_own), so that
    torch.load's report, judged after this, names only what the file's bytes do beyond joblib's and numpy's own."""
    first = next((w for w, _ in traced.walks if w.start == 0), None)
    if first is None or not any(n in JOBLIB_OWN for n in first.globals):
        return None
    for w, _ in traced.walks:
        accept_own(w, numpy_own)
    t = Trace(path, format="joblib pickle")
    t.reads = f"{LOADER} unpickles it from byte 0, reading each array's bytes after its wrapper"
    w, arrays = walk_joblib(FileWindow(f, 0, size), "joblib pickle", 0, numpy_own)
    reach(t, w, arrays, numpy_own)
    if w.failure:
        t.notes.append(f"joblib.load raises at byte {w.fail_at:,}: {w.failure}")
    r = report(t, safe_verdict(LOADER), loader=LOADER)
    r["torch_load"] = f"not torch.load's: {t.reads}; torch.load: {traced.raises or traced.reads}"
    return r
