"""A pickle's opcodes walked the way CPython's C unpickler (`_pickle.Unpickler`, what `torch.load`
uses unless weights_only) would execute them, without executing anything (docs/torch.md, `ckptstat scan`).

The walk keeps a model of the unpickler's stack, marks and memo, so that it knows every global the
unpickler would import (GLOBAL and INST lines; STACK_GLOBAL's two strings, however they were pushed:
SHORT_BINUNICODE, BINSTRING, text STRING, memo round trips, DUP), and where the C unpickler certainly
stops with an error (truncation, an unknown opcode, stack underflow, a missing MARK or memo entry,
STACK_GLOBAL over non-strings, a persistent id without persistent_load, out-of-band buffers). Where the
outcome depends on what an allowed call returns, the walk assumes the unpickler goes on: it may report
more than torch would reach, never less.

It also keeps the values a later step of torch.load needs (the legacy magic number and protocol, the
tar format's counts and storage types): ints, floats, strings, bytes, tuples and lists of them, globals.

Buffering matters where one stream holds several pickles (the legacy format) and where a FRAME is
read: the C unpickler reads a whole frame at once, and when the stream has no `peek` (io.BytesIO, an
unbuffered file), an opcode whose bytes run past the frame's end is read from *after* the frame (the
frame's tail is dropped), and the next pickle starts after the frame, not after STOP. With `peek`
(a buffered file) that depends on the buffer's state, so there the walk reports such a pickle as
ambiguous instead of guessing.
"""
from __future__ import annotations

import _compat_pickle
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .allowlist import STORAGE_ITEMSIZE, allowed_name, weights_only_allows
from .data_classes import CALLBACK_KEYS, NAMED_ONLY, PLAIN_DATA, TRAINER_CLASSES
from .streams import Source, Truncated

MAX_OPS = 4_000_000          # opcodes walked in one pickle (unpickler.MAX_OPS)
MAX_STRING = 1 << 16         # strings kept as values (longer ones: known to be str, value dropped)
MAX_LINE = 1 << 16           # a text opcode's line (GLOBAL module or name...) read at once
MAX_TRACKED = 100_000        # items a tracked list or tuple keeps (and the dict items a walk keeps in all)
MAX_DICT = 64                # items a TrackedDict keeps (a joblib wrapper's state holds 6)
Buffering = Literal["peek", "drop"]
CALLS_TRAINER_CLASS = {   # (data_classes.TRAINER_CLASSES: plain data only as their pickles rebuild them)
    "object": "called (its __init__ and __post_init__ run), where pickle rebuilds it without a call (NEWOBJ, then BUILD)",
    "enum": "called with other than one value, where pickle looks a member up by its value",
}
USED_BESIDE_KEYS = ("outside torch's weights_only allowlist, and referenced other than as a dict's key (Lightning "
                    "before 1.5 keys `callbacks` by this class, which is harmless; called or passed on, it may run)")
IMPORTS = ("GLOBAL", "STACK_GLOBAL", "INST")   # the opcodes whose finding is a global imported (and maybe called)
REBUILD_FROM_TYPE = "torch._tensor._rebuild_from_type_v2"   # (func, new_type, args, state): calls func(*args)
CALLS_NAMED_TYPE = ("a type plain data only names, called or built with arguments: it runs their own methods (dict(cfg) "
                    "and list(cfg) read an omegaconf config's values, resolving its interpolations)")
REBUILD_UNFOLLOWED = ("calls func(*args) with a func or args the walk does not know (made by a call: "
                      "`tuple([...])`), so not which class it calls")
KEYWORDS = ("NEWOBJ_EX (cls.__new__ with keyword arguments), which torch never writes and weights_only refuses: "
            "torch.Tensor(cdata=n) and UntypedStorage(allocator=n) take n for a C++ pointer")
BUILDS_GLOBAL = ("BUILD on the imported global itself (a class or function, not an object made from it): its "
                 "attributes are set, changing it for the whole loading process")

# ---------------------------------------------------------------------------------------------
# Values the walk keeps.

@dataclass(frozen=True)
class Global:
    name: str


@dataclass(frozen=True)
class Opaque:
    """A value of a known kind whose content the walk does not keep (dict, set, bytes...)."""
    kind: str


UNKNOWN = Opaque("unknown")                # the result of a call: anything
DICT = Opaque("dict")                      # a dict (EMPTY_DICT, DICT) whose items the walk does not keep
LONG_STR = Opaque("str")                   # a str too long to keep


def certainly_not_str(v: object) -> bool:
    return not isinstance(v, str) and v is not LONG_STR and v is not UNKNOWN


@dataclass(frozen=True)
class Finding:
    offset: int              # of the opcode, from the pickle's start
    opcode: str
    name: str                # the global, or what stands for it
    why: str


@dataclass
class Walk:
    """What one pickle does when the C unpickler runs it."""
    record: str
    start: int | None                        # file offset of its first byte (None: compressed)
    opcodes: int = 0
    globals: dict[str, bool] = field(default_factory=dict)     # effective name -> allowed
    counts: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)      # what may run code
    plain_data: set[str] = field(default_factory=set)         # globals outside the allowlist that make values only
    failure: str | None = None               # why the unpickler certainly raises...
    fail_at: int = 0                         # ...at this offset
    incomplete: str | None = None            # the walk gave up (a limit): the rest is unknown
    ambiguous: str | None = None             # buffering decides how the unpickler reads it
    value: object = UNKNOWN                  # what STOP returns (when known)
    end: int | None = None                   # where the stream's next read starts after STOP
    proto: int = 0
    weights_only: str | None = None          # why torch's weights_only unpickler refuses it (None: accepted)
    # where the unpickler raised (`failure`) but other common loaders go on, and which: the walk goes on with them
    lenient_from: int | None = None
    lenient_loaders: str = ""

    def accept_imports(self, names: frozenset[str]) -> None:
        """Globals a loader's own unpickling imports, accepted beside torch's allowlist: their imports are no
        finding. What the pickle does with them stays one (a BUILD on the class itself, NEWOBJ_EX of it)."""
        self.findings = [fd for fd in self.findings if fd.name not in names or fd.opcode not in IMPORTS]
        self.plain_data -= names

    def accept(self, names: frozenset[str]) -> None:
        """accept_imports, and the globals table says they are allowed (numpy's, joblib's own unpickling)."""
        self.accept_imports(names)
        self.globals = {n: ok or n in names for n, ok in self.globals.items()}

    @property
    def unknown(self) -> str | None:
        """Why scan cannot tell all this pickle does (None: it can)."""
        return self.incomplete or self.ambiguous


@dataclass
class KeyUse:
    """A CALLBACK_KEYS global's references: plain data when each one pushed became a dict's key."""
    opcode: str
    offset: int
    pushed: int = 0
    keys: int = 0


class Fail(Exception):
    pass


class TooManyDigits(Fail):
    """An INT / LONG text argument past Python's digit limit: the default unpickler raises, BIG_INT_LOADERS read on."""


class Incomplete(Exception):
    """The walk cannot tell what the loader reads next (a `Builds` says why): the rest of the pickle is unknown."""


class TrackedDict(dict[object, object]):
    """A dict the pickle builds, its items kept (only where a `Builds` reads them: a joblib array wrapper's state);
    `exact` is False once an item could not be kept."""
    exact = True


class Builds(Protocol):
    """A loader whose unpickler does more than CPython's at a BUILD (joblib's NumpyUnpickler reads an array's bytes
    from the stream: analysis/scan/joblib_arrays.py) models the objects its calls make and what a BUILD does."""

    def made(self, m: Machine, fn: object, args: object, init: bool) -> object:
        """The value a call of `fn` on `args` pushes; `init`: the class's __init__ runs (REDUCE, OBJ and INST with
        arguments), else only its __new__ (NEWOBJ, NEWOBJ_EX, OBJ and INST without)."""

    def built(self, m: Machine, obj: object, state: object) -> object:
        """The value BUILD leaves on the stack when it sets `state` on `obj` (it may read from `m.src`)."""


# The most decimal digits Python converts to an int (sys.int_info.default_max_str_digits; a loader's process may raise
# it with PYTHONINTMAXSTRDIGITS, which the walk does not know: past it the walk stops as the default unpickler does)
MAX_INT_DIGITS = sys.int_info.default_max_str_digits
# The loaders that go on where torch.load stops: Python 2 strings read as latin-1; Python's own pure-Python unpickler
# (joblib's NumpyUnpickler subclasses it), which reads a FRAME longer than the data short
LATIN1_LOADERS = "pickle.load(encoding='latin1'), np.load(encoding='latin1'), pandas.read_pickle"
PURE_PYTHON_LOADERS = "pickle._Unpickler and joblib.load (Python's pure-Python unpickler reads a short FRAME as it is)"
BIG_INT_LOADERS = ("a process without Python's int digit limit (PYTHONINTMAXSTRDIGITS=0, -X int_max_str_digits=0, "
                   "sys.set_int_max_str_digits(0), Python before 3.10.7)")


def text_int(line: bytes, long: bool) -> object:
    """INT / LONG text arguments as the C unpickler reads them (strtol, then PyLong_FromString with
    base 0), kept only in the plain decimal form where the two readings cannot differ."""
    body = line[:-1]
    if long and body.endswith(b"L"):
        body = body[:-1]
    if not long and body in (b"00", b"01"):
        return body == b"01"
    digits = body[1:] if body[:1] in (b"+", b"-") else body
    if not digits.isdigit() or not digits.isascii() or (len(digits) > 1 and digits[:1] == b"0"):
        return UNKNOWN
    if len(digits) > MAX_INT_DIGITS:   # (PyLong_FromString's limit: the unpickler raises ValueError here)
        raise TooManyDigits(f"an integer of {len(digits):,} digits (over Python's {MAX_INT_DIGITS:,})")
    value = int(body)
    if not long and len(line) == 3 and value in (0, 1):   # a 2-character line holding 0 or 1 is a bool
        return bool(value)
    return value


# ---------------------------------------------------------------------------------------------
# The machine: the C unpickler's reads, stack, marks, memo and find_class (pickle_walk.py runs opcodes on it).

class Machine:
    def __init__(self, src: Source, walk: Walk, object_pickle: bool, persistent: bool | str, torch_remap: bool,
                 buffering: Buffering, builds: Builds | None = None):
        self.src, self.w = src, walk
        self.builds = builds
        self.tracked = 0                  # dict items kept (TrackedDict): MAX_DICT a dict, MAX_TRACKED a walk
        self.object_pickle, self.persistent, self.torch_remap = object_pickle, persistent, torch_remap
        self.buffering = buffering
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.buf_end: int | None = None   # end of the frame the unpickler holds in its buffer
        self.op_at = 0
        self.keyed: dict[str, KeyUse] = {}

    # --- reading, with the C unpickler's frame semantics
    def _ambiguous(self, why: str) -> None:
        self.w.ambiguous = self.w.ambiguous or f"offset {self.op_at}: {why}"

    def _fit(self, n: int) -> None:
        if self.buf_end is None:
            return
        pos = self.src.pos
        if pos + n <= self.buf_end:
            return
        if pos < self.buf_end:
            if self.buffering == "drop":
                self.src.skip(self.buf_end - pos)     # the rest of the frame is never read
            else:
                self._ambiguous("an opcode runs past the end of its FRAME")
        self.buf_end = None

    def read(self, n: int) -> bytes:
        self._fit(n)
        return self.src.read(n)

    def opcode(self) -> int:
        """read(1)[0], without _fit's call where the byte is inside the frame (or there is none)."""
        if self.buf_end is None or self.src.pos < self.buf_end:
            return self.src.byte()
        return self.read(1)[0]

    def skip(self, n: int) -> None:
        self._fit(n)
        self.src.skip(n)

    def readline(self) -> tuple[bytes, bool]:
        """A text argument: (the line, up to MAX_LINE bytes of it, with its newline; whether it was longer)."""
        if self.buf_end is not None and self.src.pos < self.buf_end:
            line, long, found = self.src.readline(MAX_LINE, self.buf_end)
            if found:
                return line, long
            self.buf_end = None
            if self.buffering == "drop":      # the unpickler reads the line afresh after the frame
                line, long, _ = self.src.readline(MAX_LINE)
                return line, long
            self._ambiguous("a text argument runs past the end of its FRAME")
            rest, long2, _ = self.src.readline(MAX_LINE)
            return line + rest, long or long2 or len(line) + len(rest) > MAX_LINE
        self.buf_end = None
        line, long, _ = self.src.readline(MAX_LINE)
        return line, long

    def int_arg(self, n: int, signed: bool = False) -> int:
        return int.from_bytes(self.read(n), "little", signed=signed)

    # --- the stack, as the C unpickler's Pdata with its marks ("fence")
    @property
    def fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def push(self, v: object) -> None:
        self.stack.append(v)

    def pop(self) -> object:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):   # (fence, inline: once an opcode or more)
            raise Fail("unpickling stack underflow")
        return self.stack.pop()

    def top(self) -> object:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise Fail("unpickling stack underflow")
        return self.stack[-1]

    def marker(self) -> int:
        if not self.marks:
            raise Fail("could not find MARK")
        return self.marks.pop()

    def pop_to(self, start: int) -> list[object]:
        if start < self.fence or start > len(self.stack):
            raise Fail("unpickling stack underflow")
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def need(self, n: int) -> None:   # n items above the fence
        if len(self.stack) - n < self.fence:
            raise Fail("unpickling stack underflow")

    def after_mark(self) -> int:
        """APPENDS / SETITEMS / ADDITEMS: the MARK, with the target container below it."""
        mark = self.marker()
        if mark > len(self.stack) or mark <= self.fence:
            raise Fail("unpickling stack underflow")
        return mark

    # --- objects: opaque, unless a Builds models them
    def made(self, fn: object, args: object, init: bool) -> object:
        """`fn(*args)` (`init`: called, as REDUCE does, or `fn.__new__(fn, *args)`, as NEWOBJ does)."""
        if init and isinstance(fn, Global) and fn.name in TRAINER_CLASSES:
            kind = TRAINER_CLASSES[fn.name]
            if kind == "object" or not (isinstance(args, tuple) and len(args) == 1):
                self.w.findings.append(Finding(self.op_at, "call", fn.name, CALLS_TRAINER_CLASS[kind]))
        if isinstance(fn, Global) and fn.name in NAMED_ONLY and args != ():
            self.w.findings.append(Finding(self.op_at, "call", fn.name, CALLS_NAMED_TYPE))
        if init and isinstance(fn, Global) and fn.name == REBUILD_FROM_TYPE:
            # it calls func(*args) (torch/_tensor.py): judged as that call; torch's pickler writes both literally
            if isinstance(args, tuple) and len(args) == 4 and isinstance(args[0], Global) and isinstance(args[2], tuple):
                self.made(args[0], args[2], True)
            else:
                self.w.findings.append(Finding(self.op_at, "call", fn.name, REBUILD_UNFOLLOWED))
        return UNKNOWN if self.builds is None else self.builds.made(self, fn, args, init)

    def built(self, obj: object, state: object) -> object:
        if isinstance(obj, Global):   # no pickler writes it: BUILD follows the object a call made
            self.note_weights_only(f"BUILD of the global {obj.name} itself")
            self.w.findings.append(Finding(self.op_at, "BUILD", obj.name, BUILDS_GLOBAL))
        return UNKNOWN if self.builds is None else self.builds.built(self, obj, state)

    def new_dict(self, items: list[object]) -> object:
        """EMPTY_DICT / DICT: a TrackedDict where a Builds reads them, else an opaque dict."""
        if self.keyed:
            self.count_keys(items)
        if self.builds is None:
            return DICT
        d = TrackedDict()
        self.set_items(d, items)
        return d

    def set_items(self, target: object, items: list[object]) -> None:
        """SETITEM / SETITEMS on `target`: kept where it is a TrackedDict, the key a str or an int, within the caps."""
        if self.keyed and (isinstance(target, TrackedDict) or target == DICT):
            self.count_keys(items)
        if not isinstance(target, TrackedDict):
            return
        for k, v in zip(items[::2], items[1::2]):
            if self.tracked >= MAX_TRACKED or len(target) >= MAX_DICT or not isinstance(k, (str, int)):
                target.exact = False
                return
            target[k] = v
            self.tracked += 1

    # --- a Lightning callback class as a dict's key (data_classes.CALLBACK_KEYS)
    def count_keys(self, items: list[object]) -> None:
        for k in items[::2]:
            if isinstance(k, Global) and k.name in self.keyed:
                self.keyed[k.name].keys += 1

    def pushed_again(self, v: object) -> None:
        """A value pushed once more (a memo GET, DUP): one more reference to count if it is a keyed global."""
        if isinstance(v, Global) and v.name in self.keyed:
            self.keyed[v.name].pushed += 1

    def settle_keys(self) -> None:
        """At the walk's end: a keyed global whose every reference became a dict's key is plain data."""
        for name, use in self.keyed.items():
            if use.keys == use.pushed:
                self.w.plain_data.add(name)
            else:
                self.w.findings.append(Finding(use.offset, use.opcode, name, USED_BESIDE_KEYS))

    # --- globals
    def find_class(self, module: str, name: str, opcode: str) -> object:
        raw = f"{module}.{name}"
        if not weights_only_allows(module, name):
            self.note_weights_only(f"global {raw}")
        if self.object_pickle and "Storage" in name and name in STORAGE_ITEMSIZE:
            # torch.load's UnpicklerWrapper.find_class: a known *Storage name becomes a storage type, unimported
            self.record(raw, True)
            return Global(f"torch.{name}")
        if self.torch_remap and module == "torch.tensor":   # torch/serialization.py load_module_mapping
            module = "torch._tensor"
        if self.w.proto < 3:       # fix_imports: Python 2 names (Lib/_compat_pickle.py)
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        full = f"{module}.{name}"
        ok = allowed_name(full)
        self.record(full, ok)
        if not ok and (full in PLAIN_DATA or full in TRAINER_CLASSES):
            self.w.plain_data.add(full)
        elif not ok and full in CALLBACK_KEYS:
            self.keyed.setdefault(full, KeyUse(opcode, self.op_at)).pushed += 1
        elif not ok:
            self.w.findings.append(Finding(self.op_at, opcode, full, "outside torch's weights_only allowlist: "
                                           "torch.load without weights_only imports it (and may call it)"))
        return Global(full)

    def record(self, name: str, allowed: bool) -> None:
        self.w.globals[name] = allowed
        self.w.counts[name] += 1

    def unresolved(self, opcode: str, name: str, why: str) -> None:
        self.record(name, False)
        self.note_weights_only(name)
        self.w.findings.append(Finding(self.op_at, opcode, name, why))

    def note_weights_only(self, why: str) -> None:
        if self.w.weights_only is None:
            self.w.weights_only = f"offset {self.op_at}: {why}"

    def decode(self, data: bytes, encoding: str, errors: str = "strict") -> str:
        try:
            return data.decode(encoding, errors)
        except UnicodeDecodeError as e:
            raise Fail(f"undecodable string ({e.reason})") from None

    def py2_str(self, data: bytes) -> str:
        """A Python 2 str (STRING, BINSTRING, SHORT_BINSTRING), decoded as torch.load does (utf-8). Where that raises,
        the loaders that read such strings as latin-1 go on (pickle.load(encoding='latin1'), as numpy's and torch's
        own `encoding="latin1"` and pandas' read_pickle call it): so does the walk, the failure kept as torch.load's."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.lenient(f"undecodable string ({e.reason})", LATIN1_LOADERS)
            return data.decode("latin-1")

    def lenient(self, failure: str, loaders: str) -> None:
        """The unpickler raises here with `failure`, but `loaders` read on: the first such point is kept, the walk goes
        on, and what it finds after is theirs (`walk` says so in each finding)."""
        if self.w.failure is None:
            self.w.failure, self.w.fail_at = failure, self.op_at
        if self.w.lenient_from is None:
            self.w.lenient_from, self.w.lenient_loaders = self.op_at, loaders

    def counted(self, n: int, kind: str) -> object:
        """A counted str or bytes argument of n bytes: its value if short, else only its kind."""
        if n > self.src.left():
            raise Truncated
        if n > MAX_STRING:
            self.skip(n)
            return Opaque("bytes") if kind == "bytes" else LONG_STR
        data = self.read(n)
        if kind == "bytes":
            return data
        if kind == "binstring":    # a Python 2 str: decoded with torch.load's encoding="utf-8"
            return self.py2_str(data)
        return self.decode(data, "utf-8", "surrogatepass")

    def stop(self) -> bool:
        self.w.value = self.pop()
        if self.buf_end is not None and self.src.pos < self.buf_end:
            if self.buffering == "drop":
                self.src.skip(self.buf_end - self.src.pos)   # the whole frame was read
            else:
                self._ambiguous("STOP before the end of its FRAME: where the next read starts depends on buffering")
        self.w.end = self.src.pos
        return True
