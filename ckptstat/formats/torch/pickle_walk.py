"""`walk`: one pickle's opcodes run on the model of the C unpickler in pickle_machine.py (the module
doc there says what is modelled). One handler per opcode, as Modules/_pickle.c runs it; Lib/pickletools.py
documents each."""
from __future__ import annotations

import codecs
import pickletools
import struct
from collections.abc import Callable
from dataclasses import replace

from ...core.limits import limits
from .pickle_machine import (
    BIG_INT_LOADERS,
    KEYWORDS,
    LONG_STR,
    MAX_LINE,
    MAX_OPS,
    MAX_TRACKED,
    PURE_PYTHON_LOADERS,
    UNKNOWN,
    Buffering,
    Builds,
    Fail,
    Finding,
    Global,
    Incomplete,
    Machine,
    Opaque,
    TooManyDigits,
    Walk,
    certainly_not_str,
    text_int,
)
from .streams import PastBound, Source, Truncated
from .unpickler import BUILD_FLOOR, MEMO_ENTRY_BYTES

# The weights_only unpickler's opcodes (torch/_weights_only_unpickler.py Unpickler.load): anything
# else is "Unsupported operand". Protocol 2's subset: a protocol 4 or 5 pickle is refused at its FRAME
# (then SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL), a protocol 3 one only where it holds bytes (SHORT_BINBYTES).
WEIGHTS_ONLY_OPS = frozenset(b"c\x81Rbae" b"su(t\x85\x86\x87N\x89\x88)]}\x8f" b"JKMGXUQhjqr\x8a\x80.")
_Handler = Callable[[Machine], object]


def _run(m: Machine) -> None:
    w = m.w
    # each opcode is a byte at least: the walk is linear in the source's bytes, so the cap grows with them
    # (a fixed 4M stopped the scan of real saves of 130k+ tensors, ~30 opcodes a tensor)
    max_ops = max(MAX_OPS, m.src.length)
    # The memo is what the walk keeps of a pickle (the stack and containers are capped): a memo entry a byte
    # (MEMOIZE after MEMOIZE) made an 8 MB pickle cost 700 MB. It is charged as the unpickler charges it.
    max_memo = (limits().pickle_build_ratio * m.src.length + BUILD_FLOOR) // MEMO_ENTRY_BYTES
    src, memo, dispatch = m.src, m.memo, _DISPATCH   # (the loop runs once an opcode: names looked up once)
    while True:
        m.op_at = src.pos
        if w.opcodes >= max_ops:
            w.incomplete = f"offset {m.op_at}: more than {max_ops:,} opcodes, scan stopped"
            return
        if len(memo) > max_memo:
            w.incomplete = (f"offset {m.op_at}: a memo of more than {max_memo:,} entries from {src.length:,} bytes "
                            "of pickle (--limit pickle_build_ratio), scan stopped")
            return
        if len(m.stack) > max_memo:   # (an EMPTY_LIST a byte: a new list an entry, as a memo entry costs)
            w.incomplete = (f"offset {m.op_at}: a stack of more than {max_memo:,} entries from {src.length:,} bytes "
                            "of pickle (--limit pickle_build_ratio), scan stopped")
            return
        w.opcodes += 1
        code = m.opcode()
        if code not in WEIGHTS_ONLY_OPS and w.weights_only is None:
            m.note_weights_only(f"opcode {_NAMES.get(code, hex(code))}, which torch's weights_only unpickler does "
                                f"not read (Unsupported operand {code})")
        handler = dispatch.get(code)
        if handler is None:
            raise Fail(f"invalid load key {bytes([code])!r}")
        if handler(m) is True:      # STOP
            return


def walk(src: Source, record: str, start: int | None, *, object_pickle: bool = False,
         persistent: bool | str = False, torch_remap: bool = False, buffering: Buffering = "peek",
         builds: Builds | None = None) -> Walk:
    """Walk one pickle from `src`'s current position (see the module doc). `object_pickle`: read by
    torch.load's UnpicklerWrapper (storage names, `torch_remap`: torch.tensor -> torch._tensor);
    `persistent`: a persistent_load is set (True: torch's zip format's, storages alone; "legacy" / "tar": the
    legacy stream's and the tar format's, which hand a module container's class back: `_persisted`);
    `buffering`: whether the stream has `peek`; `builds`: the loader's own objects, where its unpickler reads more
    at a BUILD (pickle_machine.Builds)."""
    w = Walk(record, start)
    m = Machine(src, w, object_pickle, persistent, torch_remap, buffering, builds)
    try:
        _run(m)
    except (Incomplete, PastBound) as e:
        w.incomplete = f"offset {m.op_at}: {e}"
    except Truncated:
        if w.failure is None:   # (else the unpickler raised before: what lenient loaders read on is the walk's too)
            w.failure, w.fail_at = "pickle data was truncated", m.op_at
    except Fail as e:
        if w.failure is None:
            w.failure, w.fail_at = str(e), m.op_at
    m.settle_keys()
    if w.lenient_from is not None:
        note = f" (only where {w.lenient_loaders} read on: the unpickler raises before it, at offset {w.fail_at})"
        w.findings = [replace(fd, why=fd.why + note) if fd.offset >= w.lenient_from else fd for fd in w.findings]
    if w.failure and w.weights_only is None:
        w.weights_only = f"offset {w.fail_at}: {w.failure}"
    return w


# ---------------------------------------------------------------------------------------------
# The opcodes (Lib/pickletools.py documents each; Modules/_pickle.c is what runs them).

def _mark(m: Machine) -> None:
    m.marks.append(len(m.stack))


def _stop(m: Machine) -> bool:
    return m.stop()


def _pop(m: Machine) -> None:
    if m.marks and m.marks[-1] == len(m.stack):
        m.marks.pop()             # POP right after a MARK pops the mark
    else:
        m.pop()


def _pop_mark(m: Machine) -> None:
    m.pop_to(m.marker())


def _dup(m: Machine) -> None:
    m.push(m.top())
    if m.keyed:
        m.pushed_again(m.top())


def _int_text(m: Machine, long_opcode: bool = False) -> None:
    line, long = m.readline()
    try:
        m.push(UNKNOWN if long else text_int(line, long_opcode))
    except TooManyDigits as e:   # torch.load raises; a process that lifted the limit reads on, and so does the walk
        m.lenient(str(e), BIG_INT_LOADERS)
        m.push(UNKNOWN)


def _long_text(m: Machine) -> None:
    _int_text(m, True)


def _float_text(m: Machine) -> None:
    line, long = m.readline()
    try:
        m.push(UNKNOWN if long else float(line[:-1].decode("ascii")))
    except (ValueError, UnicodeDecodeError):
        m.push(UNKNOWN)       # PyOS_string_to_double differs from float() at the edges: no certain failure


def _persid(m: Machine) -> None:
    m.readline()
    m.note_weights_only("persistent id")
    if not m.persistent:
        raise Fail("a persistent id without a persistent_load")
    m.push(UNKNOWN)


def _binpersid(m: Machine) -> None:
    pid = m.pop()
    if not m.persistent:
        m.note_weights_only("persistent id outside the object pickle")
        raise Fail("a persistent id without a persistent_load")
    value = _persisted(m, pid)
    m.push(value)
    if m.keyed:
        m.pushed_again(value)   # (a class handed back is one more reference: a memoised id gives it again and again)


def _persisted(m: Machine, pid: object) -> object:
    """What torch's persistent_load hands back for `pid` (torch/serialization.py): the legacy stream's for
    ('module', cls, source file, source) and the tar format's for any tuple is its class, whose source it diffs with
    the saved one (writing `<cls.__name__>.patch` where cls.dump_patches is set: a BUILD on a global that sets both is
    caught as one); anything else the walk does not model (a storage)."""
    if not isinstance(pid, tuple) or not pid:
        return UNKNOWN
    if m.persistent == "legacy" and len(pid) > 1 and pid[0] in ("module", b"module"):
        return pid[1]
    return pid[0] if m.persistent == "tar" else UNKNOWN


def _call2(init: bool) -> _Handler:   # REDUCE (callable, args: init) and NEWOBJ (cls, args: cls.__new__)
    def run(m: Machine) -> None:
        args = m.pop()
        fn = m.pop()
        m.push(m.made(fn, args, init))
    return run


def _newobj_ex(m: Machine) -> None:
    m.pop()
    args = m.pop()
    cls = m.pop()
    m.w.findings.append(Finding(m.op_at, "NEWOBJ_EX", cls.name if isinstance(cls, Global) else
                                "<a class NEWOBJ_EX builds, scan cannot name>", KEYWORDS))
    m.push(m.made(cls, args, False))


def _string_text(m: Machine) -> None:
    line, long = m.readline()
    if long:
        m.push(LONG_STR)
        return
    body = line[:-1]
    if len(body) < 2 or body[0] != body[-1] or body[:1] not in (b"'", b'"'):
        raise Fail("the STRING opcode argument must be quoted")
    try:
        data = codecs.escape_decode(body[1:-1])[0]
    except ValueError as e:
        raise Fail(f"bad STRING escape ({e})") from None
    m.push(m.py2_str(data))


def _counted(size: int, signed: bool, kind: str) -> _Handler:
    def run(m: Machine) -> None:
        n = m.int_arg(size, signed)
        if n < 0:
            raise Fail("negative byte count")
        m.push(m.counted(n, kind))
    return run


def _unicode_text(m: Machine) -> None:
    line, long = m.readline()
    if long:
        m.push(LONG_STR)
        return
    try:
        m.push(codecs.raw_unicode_escape_decode(line[:-1])[0])
    except UnicodeDecodeError as e:
        raise Fail(f"undecodable UNICODE ({e.reason})") from None


def _extend(target: object, items: list[object]) -> None:
    if isinstance(target, list):
        if len(target) + len(items) <= MAX_TRACKED:
            target.extend(items)
        else:
            del target[MAX_TRACKED - 1:]
            target.append(UNKNOWN)   # too long to keep: its content is no longer exact


def _append(m: Machine) -> None:
    m.need(2)
    item = m.stack.pop()
    _extend(m.stack[-1], [item])


def _appends(m: Machine) -> None:
    mark = m.after_mark()
    _extend(m.stack[mark - 1], m.pop_to(mark))


def _build(m: Machine) -> None:
    m.need(2)
    state = m.stack.pop()
    m.stack[-1] = m.built(m.stack[-1], state)


def _names(m: Machine, opcode: str) -> tuple[str, str] | None:
    """GLOBAL / INST arguments: two lines, each a character or more and a newline, UTF-8."""
    names = []
    for _ in range(2):
        line, long = m.readline()
        if len(line) < 2 and not long:
            raise Fail("pickle data was truncated (an empty line)")
        if long:
            m.unresolved(opcode, "<global with a name too long to keep>", "a global name longer than scan keeps")
            return None
        try:
            names.append(line[:-1].decode("utf-8"))
        except UnicodeDecodeError:
            raise Fail("undecodable global name") from None
    return names[0], names[1]


def _global(m: Machine) -> None:
    names = _names(m, "GLOBAL")
    m.push(UNKNOWN if names is None else m.find_class(*names, "GLOBAL"))


def _inst(m: Machine) -> None:
    mark = m.marker()         # the C unpickler looks for the MARK before it reads the names
    names = _names(m, "INST")
    cls = UNKNOWN if names is None else m.find_class(*names, "INST")
    args = m.pop_to(mark)
    m.push(m.made(cls, tuple(args), bool(args)))   # (pickle's _instantiate: no arguments, only __new__)


def _obj(m: Machine) -> None:
    mark = m.marker()
    if len(m.stack) - mark < 1:
        raise Fail("unpickling stack underflow")
    cls, *args = m.pop_to(mark)
    m.push(m.made(cls, tuple(args), bool(args)))


def _dict(m: Machine) -> None:
    items = m.pop_to(m.marker())
    if len(items) % 2:
        raise Fail("odd number of items for DICT")
    m.push(m.new_dict(items))


def _get_value(m: Machine, idx: int) -> None:
    if idx not in m.memo:
        raise Fail(f"memo value not found at index {idx}")
    m.push(m.memo[idx])
    if m.keyed:
        m.pushed_again(m.memo[idx])


def _line_index(m: Machine) -> int:
    """A text GET / PUT index as the C unpickler reads it: PyLong_FromString(line, NULL, 10), which stops at a NUL and
    takes white space around the digits (int() of the same ASCII text: the one parser). The memo is the one place a
    value comes back from: an index the walk cannot read would hide what it fetches (a class then called), so a line
    longer than the walk keeps (70,000 spaces, then a digit) leaves the rest unknown."""
    line, long = m.readline()
    if long:
        raise Incomplete(f"a memo index on a line of more than {MAX_LINE:,} bytes (white space the unpickler skips)")
    try:
        return int(line.split(b"\0", 1)[0].decode("ascii"), 10)
    except (ValueError, UnicodeDecodeError):
        raise Fail("invalid memo index") from None


def _get_text(m: Machine) -> None:
    _get_value(m, _line_index(m))


def _get_bin(size: int) -> _Handler:
    def run(m: Machine) -> None:
        _get_value(m, m.int_arg(size))
    return run


def _put_value(m: Machine, idx: int) -> None:
    value = m.top()
    if idx < 0:
        raise Fail("negative PUT argument")
    m.memo[idx] = value


def _put_text(m: Machine) -> None:
    _put_value(m, _line_index(m))


def _put_bin(size: int) -> _Handler:
    def run(m: Machine) -> None:
        _put_value(m, m.int_arg(size))
    return run


def _memoize(m: Machine) -> None:
    m.memo[len(m.memo)] = m.top()


def _list(m: Machine) -> None:
    items = m.pop_to(m.marker())
    m.push(items if len(items) <= MAX_TRACKED else Opaque("list"))


def _tuple(m: Machine) -> None:
    items = m.pop_to(m.marker())
    m.push(tuple(items) if len(items) <= MAX_TRACKED else Opaque("tuple"))


def _tuple_n(n: int) -> _Handler:
    def run(m: Machine) -> None:
        m.push(tuple(m.pop_to(len(m.stack) - n)))
    return run


def _setitem(m: Machine) -> None:
    m.need(3)
    m.set_items(m.stack[-3], m.stack[-2:])
    del m.stack[-2:]


def _setitems(m: Machine) -> None:
    mark = m.after_mark()
    if (len(m.stack) - mark) % 2:
        raise Fail("odd number of items for SETITEMS")
    m.set_items(m.stack[mark - 1], m.pop_to(mark))


def _additems(m: Machine) -> None:
    m.pop_to(m.after_mark())


def _frozenset(m: Machine) -> None:
    m.pop_to(m.marker())
    m.push(Opaque("frozenset"))


def _proto(m: Machine) -> None:
    v = m.read(1)[0]
    if v > 5:
        raise Fail(f"unsupported pickle protocol: {v}")
    m.w.proto = v


def _ext(size: int) -> _Handler:
    def run(m: Machine) -> None:
        code = m.int_arg(size, signed=size == 4)
        if code <= 0:
            raise Fail("EXT specifies code <= 0")
        m.unresolved(f"EXT{size}", f"<copyreg extension code {code}>",
                     "a global looked up in copyreg's extension registry: whatever the loading process registered")
        m.push(UNKNOWN)
    return run


def _long_bin(size: int) -> _Handler:
    def run(m: Machine) -> None:
        n = m.int_arg(size, signed=size == 4)
        if n < 0:
            raise Fail("LONG pickle has negative byte count")
        if n > 64:
            m.skip(n)
            m.push(UNKNOWN)     # an int this long is no magic number, protocol nor count torch reads
        else:
            m.push(int.from_bytes(m.read(n), "little", signed=True))
    return run


def _stack_global(m: Machine) -> None:
    name = m.pop()
    module = m.pop()
    if isinstance(module, str) and isinstance(name, str):
        m.push(m.find_class(module, name, "STACK_GLOBAL"))
    elif certainly_not_str(module) or certainly_not_str(name):
        raise Fail("STACK_GLOBAL requires str")
    else:
        m.unresolved("STACK_GLOBAL", "<unresolved STACK_GLOBAL>",
                     "STACK_GLOBAL over strings scan cannot follow: it may name any global")
        m.push(UNKNOWN)


def _frame(m: Machine) -> None:
    n = m.int_arg(8)
    if n > m.src.left():
        m.lenient("FRAME longer than the data (pickle data was truncated)", PURE_PYTHON_LOADERS)
        n = m.src.left()
    pos = m.src.pos
    if m.buf_end is not None and pos + n <= m.buf_end:
        return                     # already buffered: the unpickler's buffer (and its end) stay as they are
    m.buf_end = pos + n


def _next_buffer(m: Machine) -> None:
    raise Fail("pickle stream refers to out-of-band data but no buffers were given")


def _readonly_buffer(m: Machine) -> None:
    m.top()


def _const(v: object) -> _Handler:
    def run(m: Machine) -> None:
        m.push(v)
    return run


def _new(kind: str) -> _Handler:
    def run(m: Machine) -> None:
        m.push([] if kind == "list" else () if kind == "tuple" else m.new_dict([]) if kind == "dict" else Opaque(kind))
    return run


def _binint(size: int, signed: bool) -> _Handler:
    def run(m: Machine) -> None:
        m.push(m.int_arg(size, signed))
    return run


def _binfloat(m: Machine) -> None:
    m.push(struct.unpack(">d", m.read(8))[0])


def _bytearray8(m: Machine) -> None:
    m.skip(m.int_arg(8))
    m.push(Opaque("bytearray"))


_DISPATCH: dict[int, _Handler] = {
    ord("("): _mark, ord("."): _stop, ord("0"): _pop, ord("1"): _pop_mark, ord("2"): _dup,
    ord("F"): _float_text, ord("I"): _int_text, ord("J"): _binint(4, True), ord("K"): _binint(1, False),
    ord("L"): _long_text, ord("M"): _binint(2, False), ord("N"): _const(None), ord("P"): _persid,
    ord("Q"): _binpersid, ord("R"): _call2(True), ord("S"): _string_text, ord("T"): _counted(4, True, "binstring"),
    ord("U"): _counted(1, False, "binstring"), ord("V"): _unicode_text, ord("X"): _counted(4, False, "str"),
    ord("a"): _append, ord("b"): _build, ord("c"): _global, ord("d"): _dict, ord("}"): _new("dict"),
    ord("e"): _appends, ord("g"): _get_text, ord("h"): _get_bin(1), ord("i"): _inst, ord("j"): _get_bin(4),
    ord("l"): _list, ord("]"): _new("list"), ord("o"): _obj, ord("p"): _put_text, ord("q"): _put_bin(1),
    ord("r"): _put_bin(4), ord("s"): _setitem, ord("t"): _tuple, ord(")"): _new("tuple"), ord("u"): _setitems,
    ord("G"): _binfloat,
    0x80: _proto, 0x81: _call2(False), 0x82: _ext(1), 0x83: _ext(2), 0x84: _ext(4), 0x85: _tuple_n(1),
    0x86: _tuple_n(2), 0x87: _tuple_n(3), 0x88: _const(True), 0x89: _const(False), 0x8A: _long_bin(1),
    0x8B: _long_bin(4),
    ord("B"): _counted(4, False, "bytes"), ord("C"): _counted(1, False, "bytes"),
    0x8C: _counted(1, False, "str"), 0x8D: _counted(8, False, "str"), 0x8E: _counted(8, False, "bytes"),
    0x8F: _new("set"), 0x90: _additems, 0x91: _frozenset, 0x92: _newobj_ex, 0x93: _stack_global,
    0x94: _memoize, 0x95: _frame,
    0x96: _bytearray8, 0x97: _next_buffer, 0x98: _readonly_buffer,
}
_NAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}
