"""The restricted unpickler, and the walk over what it built.

`SafeUnpickler` subclasses pickle's pure-Python Unpickler (pickle._Unpickler, the reference
implementation of pickle.Unpickler): its memo is a dict, so a hostile LONG_BINPUT index cannot make
it allocate a huge memo array, and each opcode can be counted and bounded. Globals resolve through
the allowlist's recording stubs (allowlist.py) and the builders of training scripts' plain data (data_classes.py);
any other global is kept as its name (allowlist.Named), refused when the pickle calls or builds it. Nothing from
the pickle is ever imported or called.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from typing import IO, Any

from ...core.limits import limits
from ...core.switches import switches
from ...errors import CorruptCheckpointError, UnsafeCheckpointError, reading
from .allowlist import (
    DENIED_MODULES,
    Forbidden,
    Named,
    Refused,
    StorageRef,
    StorageType,
    TensorRef,
    is_allowed,
    stub_for,
    weights_only_name,
)
from .data_classes import MEMBER_VALUE, TABLE, DataGlobal, EnumNode, Filled, Member
from .pickled_objects import REBUILDERS, Instance

# Limits on what a pickle may build (the file is untrusted).
MAX_OPS = 4_000_000        # opcodes in one pickle, or its byte count if more (each opcode is a byte at least)
MAX_ITEMS = 1_000_000      # items in one list / tuple / dict / set
MAX_STACK = 100_000        # unpickler stack entries and open MARKs
MAX_DEPTH = 100            # container nesting the tensor walk follows
BUILD_FLOOR = 16 << 20     # bytes the calls of any pickle may build, beyond limits().pickle_build_ratio x its size
# What one tensor name costs once opened (its TensorInfo, name and view: ~1 KiB), charged by walk() against the build
# budget: a memoised tensor is named again for 2 bytes of pickle (BINGET), and real saves spend ~130 bytes a tensor.
TENSOR_BYTES = 1024
MEMO_ENTRY_BYTES = 100     # a memo entry: its int key and dict slot (also charged by scan's walk, pickle_walk.py)
MEMBER_BYTES = 200         # an enum call read as a Member, and its entry in SafeUnpickler.members (from 6 bytes)

_CONTAINER_OPS = {pickle.APPEND, pickle.APPENDS, pickle.SETITEM, pickle.SETITEMS, pickle.ADDITEMS,
                  pickle.LIST, pickle.TUPLE, pickle.DICT, pickle.FROZENSET}
# An opcode handler of pickle._Unpickler.dispatch, called with the unpickler.
_Op = Callable[[Any], None]


class Bounded:
    """A read-only view of a pickle stream that never asks for more than `limit` bytes in all.

    A pickle's lengths (BINUNICODE, BINBYTES8, LONG4, FRAME...) are untrusted, and the file's read(n)
    allocates n bytes before it reads: without this a 2 KB file claiming a 4 GiB string makes the
    unpickler (or pickletools, for scan) allocate 4 GiB."""

    def __init__(self, f: IO[bytes], limit: int):
        self.f, self.left, self.limit = f, max(limit, 0), max(limit, 0)

    def read(self, n: int | None = -1) -> bytes:
        data = self.f.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(data)
        return data

    def readline(self, limit: int | None = -1) -> bytes:
        data = self.f.readline(self.left if limit is None or limit < 0 else min(limit, self.left))
        self.left -= len(data)
        return data

    def tell(self) -> int:
        return self.limit - self.left


def remaining(f: IO[bytes]) -> int:
    """Bytes left in a seekable stream (a file or BytesIO)."""
    pos = f.tell()
    end = f.seek(0, os.SEEK_END)
    f.seek(pos)
    return end - pos


# What an opcode's result costs in memory, in bytes (CPython 3.11, 64-bit, sys.getsizeof; a memo entry: its int
# key and dict slot), charged to SafeUnpickler.built with what calls build. The opcode bound grows with the
# pickle's size, so it no longer bounds memory: a 4 MB data.pkl of 3.96M EMPTY_SETs (1 byte each) built
# 931 MB of sets, 1.3M memoised ones 403 MB. A real save costs ~9 bytes a byte of pickle (130,000 tensors:
# 8 memo entries, 2 strings and 2 tuples a tensor), an empty set 216 a byte.
_COSTS = {
    **dict.fromkeys((pickle.EMPTY_SET, pickle.FROZENSET), 216),
    **dict.fromkeys((pickle.EMPTY_DICT, pickle.DICT), 64),
    **dict.fromkeys((pickle.EMPTY_LIST, pickle.LIST), 56),
    pickle.TUPLE: 56, pickle.TUPLE1: 48, pickle.TUPLE2: 56, pickle.TUPLE3: 64,
    **dict.fromkeys((pickle.PUT, pickle.BINPUT, pickle.LONG_BINPUT, pickle.MEMOIZE), MEMO_ENTRY_BYTES),
    **dict.fromkeys((pickle.BINUNICODE, pickle.SHORT_BINUNICODE, pickle.BINUNICODE8, pickle.UNICODE, pickle.STRING,
                     pickle.BINSTRING, pickle.SHORT_BINSTRING, pickle.BINBYTES, pickle.SHORT_BINBYTES,
                     pickle.BINBYTES8), 49),
    **dict.fromkeys((pickle.BININT, pickle.BININT2, pickle.LONG1, pickle.LONG4, pickle.INT, pickle.LONG), 28),
    pickle.BINFLOAT: 24, pickle.FLOAT: 24,
}


def guarded(op: _Op, sized: bool, cost: int = 0) -> _Op:
    def run(self: SafeUnpickler) -> None:
        self.ops += 1
        if self.ops > self.max_ops:
            raise Refused(f"pickle runs more than {self.max_ops:,} opcodes")
        if cost:
            self.built += cost
            if self.built > self.max_built:
                self.over_budget()
        op(self)
        if len(self.stack) > MAX_STACK or len(self.metastack) > MAX_STACK:
            raise Refused(f"pickle stack deeper than {MAX_STACK:,}")
        if sized and self.stack:
            top = self.stack[-1]
            if isinstance(top, (list, tuple, dict, set, frozenset)) and len(top) > MAX_ITEMS:
                raise Refused(f"pickle builds a {type(top).__name__} of more than {MAX_ITEMS:,} items")
    return run


class SafeUnpickler(pickle._Unpickler):
    """Unpickles against torch's weights_only allowlist, with recording stubs (see module doc), and the plain data
    training scripts save beside their tensors (data_classes.py: argparse.Namespace, numpy scalars, omegaconf
    configs...), built as the values they hold; every global outside the allowlist it names is in `outside`.
    Reads at most `limit` bytes of `file` (default: what is left of it)."""

    # pickle._Unpickler's working state, which typeshed does not declare.
    stack: list[Any]
    metastack: list[list[Any]]
    append: Callable[[object], None]
    read: Callable[[int], bytes]
    readline: Callable[[], bytes]
    readinto: Callable[[bytearray], int]

    dispatch = {k: guarded(f, bytes([k]) in _CONTAINER_OPS, _COSTS.get(bytes([k]), 0))
                for k, f in pickle._Unpickler.dispatch.items()}

    def __init__(self, file: IO[bytes], path: str, record: str, storages: bool = True, limit: int | None = None):
        self.stream = Bounded(file, remaining(file) if limit is None else limit)
        # A pickle already in memory and within the limit is read directly: BytesIO.read(n) returns at most
        # what is left and never allocates a claimed length, so Bounded's Python call per read (one per
        # opcode: most of the time of opening a 500k-record checkpoint) buys nothing there.
        direct = isinstance(file, io.BytesIO) and remaining(file) <= self.stream.limit
        super().__init__(file if direct else self.stream, encoding="utf-8")
        self.path, self.record, self.storages_allowed = path, record, storages
        self.ops = 0
        # ~30 opcodes a tensor: a fixed 4M refused real saves of 130k+ tensors. Walking is linear in the bytes
        # (a byte an opcode at least), which pickle_bytes bounds, so the cap grows with the pickle's size.
        self.max_ops = max(MAX_OPS, self.stream.limit)
        self.storages: dict[str, StorageRef] = {}
        # What the pickle builds is counted against a budget in bytes: each opcode's object (_COSTS), and what
        # calls (REDUCE, NEWOBJ) return, which the bytes read do not bound: bytearray(x), set(x), OrderedDict(x)
        # each copy an object the pickle may reach again and again through its memo (a 61 KB pickle made
        # 3.85 GB of bytearray copies).
        self.built = 0
        self.max_built = limits().pickle_build_ratio * self.stream.limit + BUILD_FLOOR
        self.outside: set[str] = set()   # globals outside the allowlist the pickle named (data classes, allowlist.Named)
        self.objects = switches().pickled_objects   # --pickled-objects: classes built without arguments: Instances
        self.instances: set[str] = set()   # the classes it built so
        # calls of a global outside the tables with one plain value (a user's Enum member, `Act("gelu")`) that no
        # omegaconf EnumNode holds (yet): id -> (the global, the Member read); any left at the end is refused
        self.members: dict[int, tuple[str, Member]] = {}

    def over_budget(self) -> None:
        raise Refused(f"pickle's opcodes and calls build more than {self.max_built:,} bytes of objects from "
                      f"{self.stream.limit:,} bytes of pickle (copies of one object through the memo, millions of empty "
                      "containers?; --limit pickle_build_ratio)")

    def account(self, obj: object) -> None:
        if isinstance(obj, (bytes, bytearray, str)):
            self.built += len(obj)
        elif isinstance(obj, (list, tuple, dict, set, frozenset)):
            self.built += 16 * len(obj)
        if self.built > self.max_built:
            self.over_budget()

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if isinstance(func, Named) and isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], MEMBER_VALUE):
            # an Enum member as pickle rebuilds it, `cls(value)`: read only where an omegaconf EnumNode holds it
            member = Member.of(func.name, args[0])
            self.members[id(member)] = (func.name, member)
            self.stack[-1] = member
            self.built += MEMBER_BYTES
        elif isinstance(func, Named):   # a class's __reduce__ of (cls, ()) (SimpleNamespace), or a call
            if not (self.objects and args == ()):
                raise Forbidden(func.name, built=args == () or self.objects)
            self.stack[-1] = self.instance(func.name)
        else:
            self.stack[-1] = func(*args)
        self.account(self.stack[-1])

    def instance(self, name: str) -> Instance:
        self.instances.add(name)
        return Instance(name)

    def find_class(self, module: str, name: str) -> object:
        full = f"{module}.{name}"
        if is_allowed(full):
            return stub_for(full)
        mapped = weights_only_name(module, name)
        data = TABLE.get(".".join(mapped))
        if data is not None:
            self.outside.add(data.name)
            return data
        if mapped[0].split(".")[0] in DENIED_MODULES:   # torch refuses these whatever a user allows
            raise UnsafeCheckpointError(self.path, self.refusal(full))
        self.outside.add(full)
        rebuild = REBUILDERS.get(".".join(mapped)) if self.objects else None
        if rebuild is not None:
            return lambda *args: self.instance(rebuild(*args))   # (Named.__call__ refuses a call)
        return Named(full)

    def refusal(self, full: str, built: bool = False) -> str:
        """The one line for a global outside the allowlist and the data table, `built` by NEWOBJ (a pickled object:
        torch.save(model) writes the model's classes so) or otherwise named or called."""
        if built and self.objects:
            whole = (" (called or built with arguments: a call, which --pickled-objects does not read; it reads objects "
                     "built without arguments)")
        elif built:
            whole = (" (a pickled object, as torch.save(model) writes: `ckptstat --pickled-objects` reads its tensors "
                     "as state_dict names them, nothing imported or called)")
        else:
            whole = ""
        return (f"{self.record} references global {full!r}{whole}, which is outside torch's weights_only allowlist "
                "and is no training script's plain data ckptstat reads; refusing to load it (nothing was executed; "
                "`ckptstat scan` lists every global)")

    def persistent_load(self, pid: object) -> StorageRef | Named:
        # legacy saves (torch < 1.6) name a pickled nn.Module's class as ('module', class, source file, source)
        if self.objects and isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "module" \
                and isinstance(pid[1], Named):
            return pid[1]
        # zip: ('storage', type, key, location, numel); legacy adds view_metadata (docs/formats.md 2, 3)
        if not (self.storages_allowed and isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise Refused(f"unexpected persistent id {str(pid)[:60]!r}")
        stype, key, _location, numel = pid[1:5]
        view = pid[5] if len(pid) == 6 else None
        if not isinstance(stype, StorageType) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise Refused(f"malformed storage id {str(pid)[:80]!r}")
        ref = StorageRef(key, stype.dtype, numel)
        prev = self.storages.setdefault(key, ref)
        # an UntypedStorage is bytes, as a ByteStorage is: torch.save writes a float8 (or other v3) tensor's storage
        # untyped and a uint8 view of it as a ByteStorage, and torch.load reads both as uint8 storages
        if (prev.dtype or "U8") != (ref.dtype or "U8"):
            raise Refused(f"storage {key!r} is referenced with two dtypes")
        if view is not None:  # legacy storage views (torch < 0.4): (view_key, offset, view_size)
            if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[1], int) and view[1] >= 0):
                raise Refused("malformed storage view metadata")
            return StorageRef(key, ref.dtype, ref.numel, view[1])
        return ref

    # BUILD sets attributes on whatever is on the stack: a data class's (data_classes.py) become its value; nothing
    # else here needs them (torch uses it for OrderedDict._metadata), so the state is dropped.
    def load_build(self) -> None:
        state = self.stack.pop()
        if self.stack and isinstance(self.stack[-1], Filled):
            self.stack[-1].build(state)
            if isinstance(self.stack[-1], EnumNode):
                self.members.pop(id(self.stack[-1].value), None)
            self.account(self.stack[-1])   # a config copies its content: one memoised content into a million configs

    # NEWOBJ calls cls.__new__: only the two allowlisted dict classes and the data classes may be built that way, and
    # with --pickled-objects any other class, given no arguments (copyreg.__newobj__ of a plain object).
    def load_newobj(self, kwargs: object = None) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if isinstance(cls, Named):
            if not (self.objects and args == () and not kwargs):
                raise Forbidden(cls.name, built=True)
            self.append(self.instance(cls.name))
        elif isinstance(cls, DataGlobal) and isinstance(args, tuple):
            self.append(cls.built(args))
        elif cls in (OrderedDict, Counter):
            self.append(cls.__new__(cls, *args))
        else:
            raise Refused("NEWOBJ on a class that is neither a dict nor a training script's plain data")
        self.account(self.stack[-1])

    def load_newobj_ex(self) -> None:
        self.load_newobj(self.stack.pop())

    # pickle's BYTEARRAY8 allocates bytearray(length) before reading: check the length first.
    def load_bytearray8(self) -> None:
        (n,) = struct.unpack("<Q", self.read(8))
        if n > self.stream.limit:
            raise Refused(f"BYTEARRAY8 of {n:,} bytes in a {self.stream.limit:,}-byte pickle")
        b = bytearray(n)
        self.readinto(b)
        self.append(b)


SafeUnpickler.dispatch[pickle.REDUCE[0]] = guarded(SafeUnpickler.load_reduce, True)
SafeUnpickler.dispatch[pickle.BUILD[0]] = guarded(SafeUnpickler.load_build, False)
SafeUnpickler.dispatch[pickle.NEWOBJ[0]] = guarded(SafeUnpickler.load_newobj, False)
SafeUnpickler.dispatch[pickle.NEWOBJ_EX[0]] = guarded(SafeUnpickler.load_newobj_ex, False)
SafeUnpickler.dispatch[pickle.BYTEARRAY8[0]] = guarded(SafeUnpickler.load_bytearray8, False)


class Record:
    """What a RecordingUnpickler's class builds: the class's name and the state BUILD gave it; nothing is imported."""

    def __init__(self, kind: str):
        self.kind: str = kind
        self.state: Any = None

    def field(self, name: str, index: int) -> Any:
        """A dataclass field from a dict state, or (a __getstate__ tuple, as DCP's TensorProperties) a tuple's item."""
        s = self.state
        if isinstance(s, dict):
            return s.get(name)
        if isinstance(s, tuple) and index < len(s):
            return s[index]
        return None


class RecordingUnpickler(SafeUnpickler):
    """torch's weights_only allowlist plus one library's own classes, named by a reader that knows the library's
    files: each of CLASSES is recorded (NEWOBJ makes a Record, BUILD gives it its state), each of CALLS maps to a
    plain function of the reader's; nothing is imported or called. DCP's metadata (formats/dcp/), DeepSpeed's
    ZeRO optimizer states (formats/training.py)."""

    CLASSES: frozenset[str] = frozenset()
    CALLS: dict[str, Callable[..., object]] = {}
    WHAT = "a recorded class"   # what the classes are, in refusals: "a DCP metadata class"

    def find_class(self, module: str, name: str) -> object:
        full = f"{module}.{name}"
        if full in self.CLASSES:
            return ("recorded class", name)
        if full in self.CALLS:
            return self.CALLS[full]
        return super().find_class(module, name)

    def refusal(self, full: str, built: bool = False) -> str:
        return (f"{self.record} references global {full!r}, which is neither {self.WHAT} nor in torch's weights_only "
                "allowlist nor a training script's plain data ckptstat reads; refusing to load it (nothing was executed)")

    def load_newobj(self, kwargs: object = None) -> None:
        cls = self.stack[-2]
        if not (isinstance(cls, tuple) and len(cls) == 2 and cls[0] == "recorded class"):
            super().load_newobj(kwargs)
            return
        del self.stack[-2:]
        self.append(Record(cls[1]))
        self.account(self.stack[-1])

    def load_build(self) -> None:
        target = self.stack[-2] if len(self.stack) > 1 else None
        if not isinstance(target, Record):
            super().load_build()
            return
        state = self.stack.pop()
        if target.state is None:
            target.state = state


# SafeUnpickler's dispatch holds its own NEWOBJ and BUILD handlers, guarded (counted and bounded); these replace them.
RecordingUnpickler.dispatch = {**SafeUnpickler.dispatch,
                               pickle.NEWOBJ[0]: guarded(RecordingUnpickler.load_newobj, False),
                               pickle.BUILD[0]: guarded(RecordingUnpickler.load_build, False)}


def unpickle(file: IO[bytes], path: str, record: str, storages: bool = True, limit: int | None = None,
             unpickler: Callable[..., SafeUnpickler] = SafeUnpickler) -> tuple[object, SafeUnpickler]:
    """The object one pickle of `file` holds, and the unpickler (its `storages`). Whatever pickle
    trips over in a malformed stream becomes a CorruptCheckpointError naming the record."""
    with reading(path, f"{record}: malformed pickle"):
        u = unpickler(file, path, record, storages, limit)
        try:
            obj = u.load()
            if isinstance(obj, (Named, DataGlobal)):   # the whole pickle a reference to code: nothing to read
                raise Forbidden(obj.name)
            if u.members:   # a call no EnumNode holds: the call it is
                raise Forbidden(next(iter(u.members.values()))[0])
            return obj, u
        except Refused as e:
            raise CorruptCheckpointError(path, f"{record}: {e}") from None
        except Forbidden as e:
            raise UnsafeCheckpointError(path, u.refusal(e.name, e.built)) from None
        except RecursionError:
            raise CorruptCheckpointError(path, f"{record}: pickle nests too deeply") from None


# ---------------------------------------------------------------------------------------------
# Walking the unpickled object: tensors get dot-joined paths, containers are visited once.

INT_TEXT_BITS = 14_000   # ints str() and json.dumps write: Python's int-to-str limit is 4,300 digits (~14,284 bits)


def int_text(v: int) -> str:
    """str(v), or its size past Python's int-to-str limit (str() raises ValueError there)."""
    return str(v) if v.bit_length() <= INT_TEXT_BITS else f"<int of {v.bit_length():,} bits>"


def key_text(k: object) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, int) and not isinstance(k, bool):
        return int_text(k)
    try:
        return repr(k)[:80]
    except (ValueError, RecursionError):   # a huge int inside a tuple key; a key nested past the recursion limit
        return f"<{type(k).__name__} key>"


def named_leaves(obj: object, leaf: tuple[type, ...], max_depth: int, too_deep: Callable[[str], None],
                 skip: Callable[[object], bool] = lambda key: False) -> Iterator[tuple[str, Any]]:
    """(dotted name, object) of each instance of `leaf` that `obj` holds through its dicts, lists and tuples, each
    container once (a numpy pickle's arrays, a torch.save's plain data: the tensors have their own, budgeted walk);
    past `max_depth` levels `too_deep(name)` raises or the branch is left; keys `skip` picks are not followed."""
    seen: set[int] = set()

    def rec(o: object, name: str, depth: int) -> Iterator[tuple[str, Any]]:
        if depth > max_depth:
            too_deep(name)
            return
        if isinstance(o, leaf):
            yield name, o
        elif isinstance(o, (dict, list, tuple)) and id(o) not in seen:
            seen.add(id(o))
            for k, v in (o.items() if isinstance(o, dict) else enumerate(o)):
                if not skip(k):
                    yield from rec(v, f"{name}.{key_text(k)}" if name else key_text(k), depth + 1)
    return rec(obj, "", 0)


def walk(obj: object, path: str, pickle_bytes: int | None = None,
         roles: dict[str, str] | None = None) -> Iterator[tuple[str, TensorRef]]:
    """(name, tensor) of every tensor `obj` holds; with `pickle_bytes` (the pickle's size), at most as many as the
    pickle's build budget pays for at TENSOR_BYTES each (one tensor named a million times through the memo). A pickled
    nn.Module's (--pickled-objects, pickled_objects.py) and a TorchScript module's (torchscript.py) are named as its
    state_dict names them, each one's role ("parameter", "buffer") put in `roles`."""
    seen: set[int] = set()
    names = 0
    most = None if pickle_bytes is None else \
        (limits().pickle_build_ratio * pickle_bytes + BUILD_FLOOR) // TENSOR_BYTES

    def charge() -> None:
        nonlocal names
        names += 1
        if most is not None and names > most:
            raise CorruptCheckpointError(path, f"pickle names more than {most:,} tensors, more than its "
                                               f"{pickle_bytes:,} bytes pay for (~{TENSOR_BYTES:,} bytes of objects "
                                               "a tensor; the same tensor named again and again through the memo?; "
                                               "--limit pickle_build_ratio)")

    def rec(o: object, name: str, depth: int) -> Iterator[tuple[str, TensorRef]]:
        if isinstance(o, TensorRef):
            charge()
            yield name or "tensor", o
            return
        if not isinstance(o, (dict, list, tuple)):
            return
        if depth >= MAX_DEPTH:
            raise CorruptCheckpointError(path, f"pickle nests containers more than {MAX_DEPTH} levels deep")
        module = o if isinstance(o, Instance) and o.is_module() else None
        if module is not None:   # a pickled model's (--pickled-objects) or a TorchScript archive's module, named as
            # state_dict names it: a module registered twice under each name
            charge()     # each visit charged as a tensor name (a module shared a million times through the memo)
        elif id(o) in seen:  # shared or cyclic containers: once (no exponential blow-up)
            return
        else:
            seen.add(id(o))
        if len(o) > MAX_ITEMS:
            raise CorruptCheckpointError(path, f"pickle holds a {type(o).__name__} of {len(o):,} items")
        if module is not None:
            for k, v, role in module.state_dict_items():
                child = f"{name}.{key_text(k)}" if name else key_text(k)
                if role is not None and roles is not None:
                    roles[child] = role
                yield from rec(v, child, depth + 1)
            return
        for k, v in o.items() if isinstance(o, dict) else enumerate(o):
            yield from rec(v, f"{name}.{key_text(k)}" if name else key_text(k), depth + 1)

    yield from rec(obj, "", 0)
