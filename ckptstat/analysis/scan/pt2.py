"""`ckptstat scan` of a torch.export archive (`.pt2`): what torch.export.load runs, found without running anything.

torch.export.load (torch/export/__init__.py `load`) reads the archive with load_pt2 (torch/export/pt2_archive/
_package.py), which, per program, reads the records formats/torch/pt2.py `read_archive` lists (`Archive.unpickled`):

- a weight or tensor constant written with `use_pickle`: torch.load(weights_only=False) of the torch.save in its
  record, followed here as torch.load's path through a file (scan/torch_load.py `follow`);
- the state dict and constants of the layout before weight configs (`data/weights/NAME.pt`, `data/constants/NAME.pt`)
  and the sample inputs (`data/sample_inputs/NAME.pt`): deserialize_torch_artifact loads them with weights_only=True
  and, when that raises (as it does on a global outside the allowlist), again with weights_only=False: the same;
- an `opaque_obj_*` constant: pickle.loads of the record, walked as one pickle;
- a `custom_obj_*` constant: torch._C._pickle_load_obj, TorchScript's C++ unpickler, which builds only registered
  TorchScript classes and imports no Python: walked and listed, its globals no finding (as a TorchScript archive's);
- an AOTInductor package's compiled libraries (`data/aotinductor/MODEL/*.so`): load_pt2 hands every model there to
  AOTIModelPackageLoader, which loads the library (native code): scan cannot vet it, so the verdict is unknown.

Not a pickle, but code all the same: the graph `models/NAME.json`. Its symbolic sizes (`{"as_expr": {"expr_str"}}`)
go to sympy.sympify (GraphModuleDeserializer._parse_sym_expr), which evaluates the string as Python with sympy's
names and the builtins in scope; torch writes them with sympy's srepr (`Mul(Integer(2), Symbol('s0', integer=True,
positive=True))`). An expression is plain (`plain_sympy`) when every name it calls is a sympy or torch sympy class
(SYMPY_CALLS), every keyword an assumption, every string a bare symbol or number, and it holds no attribute access,
subscript, lambda or other syntax: anything else is a finding. Its `guards_code` lines are compiled by ep.module()
into the guard that runs on every call of the loaded module, with `torch` and `math` in scope (symbolic_shapes
SYMPY_INTERP): a line is plain (`plain_guard`, parsed by Python's ast, never run) when it only reads the inputs'
sizes, strides and offsets (`L['x'].size()[0]`), does arithmetic and comparisons, and calls only the shape helpers
torch prints (GUARD_CALLS); any other line makes the verdict unknown.

torch.export.load falls back to the layout of torch before 2.8 when load_pt2 finds no program: a zip whose
`serialized_state_dict.pt`, `serialized_constants.pt` and `serialized_example_inputs.pt` (read with Python's
zipfile) go through deserialize_torch_artifact: followed the same way. The verdicts are torch.load's (torch's
weights_only allowlist); the report names the loader.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
import zipfile
from typing import IO, Any

from ...core.io import Window
from ...core.limits import limits
from ...errors import CorruptCheckpointError
from ...formats.torch import pt2
from ...formats.torch.containers import TorchZip, zip_open
from ...formats.torch.pickle_machine import Finding, Walk
from ...formats.torch.pickle_walk import walk
from ...formats.torch.streams import FileWindow, Source, Truncated
from ...formats.torch.zipdir import central_directory
from .torch_load import MAX_ZIP_ENTRIES, Trace, _member_source, follow, report

FORMAT = "torch.export archive (.pt2)"
OLD_FORMAT = "torch.export archive (torch < 2.8 layout)"
LOADER = "torch.export.load"
OLD_RECORDS = ("serialized_state_dict.pt", "serialized_constants.pt", "serialized_example_inputs.pt")
SYMPIFY = "sympy.sympify, which evaluates it as Python"
# What srepr writes for the shape expressions torch serializes (sympy's classes and singletons), and torch's own
# sympy functions (torch/_export/serde/serialize.py `sympy_functions`: tests/test_pt2_scan.py reads them there).
SYMPY_CALLS = frozenset({
    "Symbol", "Dummy", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Mod", "floor",
    "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan",
    "Equality", "Unequality", "And", "Or", "Not", "Piecewise", "ExprCondPair", "Tuple", "Half", "One", "Zero",
    "NegativeOne", "Infinity", "NegativeInfinity", "ComplexInfinity", "NaN", "BooleanTrue", "BooleanFalse", "sqrt",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv", "LShift",
    "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
})
SYMPY_KEYWORDS = frozenset({
    "integer", "positive", "negative", "nonnegative", "nonpositive", "nonzero", "zero", "real", "finite", "infinite",
    "commutative", "even", "odd", "rational", "irrational", "extended_real", "precision", "evaluate",
})
_PLAIN_STRING = re.compile(r"""^(?:'[A-Za-z0-9_.+-]*'|"[A-Za-z0-9_.+-]*")$""")
_PLAIN_OPS = frozenset({"(", ")", ",", "=", "+", "-", "*", "/", "**", "%"})
MAX_EXPR = 1 << 16
# What a plain guard may call: builtins and torch's and math's symbolic-shape helpers; and the methods it may call on
# an input (symbolic_shapes' Python printer writes these).
GUARD_CALLS = frozenset({
    "max", "min", "abs", "int", "float", "bool", "round", "IsNonOverlappingAndDenseIndicator",
    "cast_symbool_to_symint_guardless", "math.floor", "math.ceil", "math.trunc", "math.sqrt", "math.pow", "math.exp",
    "math.log", "math.log2", "math.cos", "math.sin", "math.tan", "math.cosh", "math.sinh", "math.tanh", "math.acos",
    "math.asin", "math.atan", "torch.sym_max", "torch.sym_min", "torch.sym_float", "torch.sym_int", "torch.sym_sqrt",
    "torch.sym_not", "torch.sym_ite", "torch.sym_sum",
})
GUARD_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel", "item"})
_GUARD_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Constant, ast.Subscript,
                ast.Call, ast.Name, ast.Attribute, ast.Load, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def _nested(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo, where: str) -> None:
    """Follow torch.load through the torch.save held in a record, its walks added to `t` as reached."""
    src, why = _member_source(f, size, info)
    if src is None:
        t.unknown.append(f"{where}: cannot be read ({why})")
        return
    sub = Trace(where)
    if isinstance(src, FileWindow):
        follow(sub, Window(f, src.start, src.length), src.length)   # type: ignore[arg-type]  # (an io.RawIOBase)
    else:   # inflated whole, as torch's reader extracts a record before torch.load reads it
        cap = limits().inflated_pickle(info.compress_size)
        if info.file_size > cap:
            t.unknown.append(f"{where}: a deflated record of {info.file_size:,} bytes; scan inflates at most {cap:,}")
            return
        data = _read(src, info.file_size)
        follow(sub, io.BytesIO(data), len(data))
    t.adopt(sub, where, src.start if isinstance(src, FileWindow) else None)


def _read(src: Source, n: int) -> bytes:
    try:
        return src.read(min(n, src.left()))
    except Truncated:   # a damaged deflate stream gives fewer bytes than its entry claims
        return b""


def _plain(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo, where: str, script: bool) -> None:
    """One pickle read whole from a record: pickle.loads, or TorchScript's unpickler (`script`)."""
    src, why = _member_source(f, size, info, walked=True)
    if src is None:
        t.unknown.append(f"{where}: cannot be read ({why})")
        return
    w: Walk = walk(src, where, src.start if isinstance(src, FileWindow) else None)
    if script:
        w.findings = []
        w.globals = dict.fromkeys(w.globals, True)
        t.walks.append((w, True))
    else:
        t.reach(w)
    if w.failure:
        t.notes.append(f"{where}: the unpickler raises at offset {w.fail_at}: {w.failure}")


def _records(path: str, f: IO[bytes], size: int) -> pt2.Read:
    """A record's bytes as torch's reader extracts them (the archive's small records: formats/torch/pt2.py)."""
    def read(info: zipfile.ZipInfo, cap: int) -> bytes:
        src, why = _member_source(f, size, info)
        if src is None:
            raise CorruptCheckpointError(path, f"record {info.filename} cannot be read ({why})")
        return _read(src, min(cap, info.file_size))
    return read


def plain_sympy(expr: str) -> str | None:
    """None when sympy.sympify of `expr` only builds sympy objects (see the module doc); else what else it does."""
    if len(expr) > MAX_EXPR:
        return f"an expression of {len(expr):,} characters"
    try:
        tokens = [tok for tok in tokenize.generate_tokens(io.StringIO(expr).readline)
                  if tok.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return "text Python's tokenizer cannot read"
    for i, tok in enumerate(tokens):
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        if tok.type == tokenize.NAME:
            if "__" in tok.string:
                return f"the name {tok.string!r}"
            if after == "(" and tok.string not in SYMPY_CALLS:
                return f"a call of {tok.string!r}"
            if after == "=" and tok.string not in SYMPY_KEYWORDS:
                return f"the keyword {tok.string!r}"
        elif tok.type == tokenize.STRING:
            if not _PLAIN_STRING.match(tok.string):
                return f"the string {tok.string[:40]}"
        elif tok.type == tokenize.OP:
            if tok.string not in _PLAIN_OPS:
                return f"{tok.string!r}"
        elif tok.type != tokenize.NUMBER:
            return f"{tok.string[:40]!r}"
    return None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def plain_guard(code: str) -> str | None:
    """None when a guards_code line only reads the inputs' shapes (see the module doc); else what else it holds."""
    if len(code) > MAX_EXPR:
        return f"a line of {len(code):,} characters"
    try:
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "text Python cannot parse"
    for node in ast.walk(tree):
        if not isinstance(node, _GUARD_NODES):
            return f"a {type(node).__name__}"
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool, str)):
            return f"the constant {node.value!r:.40}"
        if isinstance(node, ast.Name) and node.id not in ("L", "torch", "math") and node.id not in GUARD_CALLS:
            return f"the name {node.id!r}"
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            method = isinstance(node.func, ast.Attribute) and node.func.attr in GUARD_METHODS and \
                _dotted(node.func.value) not in ("torch", "math")
            if node.keywords or not (name in GUARD_CALLS or method and not node.args):
                return f"a call of {name!r}"
        if isinstance(node, ast.Attribute):
            if _dotted(node) not in GUARD_CALLS and node.attr not in GUARD_METHODS:
                return f"the attribute {node.attr!r}"
    called = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
    for node in ast.walk(tree):   # an attribute is only ever called (a method read off an input, or a helper)
        if isinstance(node, ast.Attribute) and id(node) not in called:
            return f"the attribute {node.attr!r} read, not called"
    return None


def _graph(t: Trace, f: IO[bytes], size: int, tz: TorchZip, program: str) -> None:
    """A program's graph (models/NAME.json): its expressions for sympy.sympify, its guards_code (module doc)."""
    info = tz.locate(f"models/{program}.json")
    if info is None:
        return
    record = f"{info.filename} ({SYMPIFY})"
    try:
        doc = pt2.json_record(t.path, info, _records(t.path, f, size))
    except CorruptCheckpointError as e:
        t.notes.append(f"{e.reason}: torch.export.load raises there")
        return
    w = Walk(record, None)
    odd: list[tuple[str, str]] = []
    stack: list[object] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            expr, code = node.get("expr_str"), node.get("guards_code")
            if isinstance(expr, str) and (why := plain_sympy(expr)) is not None:
                w.findings.append(Finding(0, "expr_str", f"sympy.sympify({expr[:60]!r})",
                                          f"torch.export.load hands it to sympy.sympify, which evaluates {why} as Python"))
            if isinstance(code, list):
                odd += [(line, why) for line in code if (why := plain_guard(str(line))) is not None]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if w.findings:
        t.reach(w)
    if odd:
        line, why = odd[0]
        t.unknown.append(f"{info.filename}: guards_code line {line[:80]!r} holds {why}: ep.module() compiles it into the "
                         f"guard that runs on every call of the loaded module ({len(odd)} such line(s))")


def _trace_pt2(path: str, f: IO[bytes], size: int, tz: TorchZip) -> Trace:
    t = Trace(path, format=FORMAT)
    a = pt2.read_archive(path, tz, _records(path, f, size))
    t.reads = f"{LOADER} reads {len(a.programs)} program(s): " + ", ".join(a.programs[:8])
    for program in a.programs:
        _graph(t, f, size, tz, program)
    for record, how in a.unpickled:
        info = tz.locate(record)
        if info is None:
            t.notes.append(f"{tz.folder}/{record}: named by the archive, but there is no such record: torch.export.load "
                           "raises there")
            continue
        where = f"{info.filename} ({how})"
        if how in (pt2.TORCH_LOAD, pt2.ARTIFACT):
            _nested(t, f, size, info, where)
        else:
            _plain(t, f, size, info, where, script=how == pt2.SCRIPT_OBJ)
    for record in a.compiled[:1]:
        t.unknown.append(f"{tz.folder}/{record}: an AOTInductor library, which torch.export.load (load_pt2) hands to "
                         "AOTIModelPackageLoader to load and run: native code scan cannot vet "
                         f"({len(a.compiled)} such record(s))")
    if not a.programs and not a.compiled:
        t.notes.append("the archive holds no models/*.json program")
    return t


def _trace_old(path: str, f: IO[bytes], size: int) -> Trace | None:
    """The layout of torch before 2.8, which torch.export.load reads with Python's zipfile: None when not it."""
    try:
        zf = zip_open(path, f)
    except CorruptCheckpointError:
        return None
    infos = zf.infolist()
    names = {i.filename for i in infos}
    if "version" not in names or "serialized_exported_program.json" not in names:
        return None
    t = Trace(path, format=OLD_FORMAT)
    t.reads = f"{LOADER} reads the layout of torch before 2.8 (Python's zipfile)"
    for info in infos:   # zipfile.read of every entry in order; deserialize_torch_artifact of the last of each name
        if info.filename in OLD_RECORDS and info is zf.getinfo(info.filename):
            _nested(t, f, size, info, f"{info.filename} ({pt2.ARTIFACT})")
    return t


def judge_export(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of a torch.export archive (local or remote `f` of `size` bytes), or None when it is not one."""
    infos, refusal = central_directory(f, size, MAX_ZIP_ENTRIES)
    tz = TorchZip(infos) if refusal is None else None
    t: Trace | None = None
    if tz is not None and not tz.refusal and _is_pt2(path, f, size, tz):
        t = _trace_pt2(path, f, size, tz)
    else:
        t = _trace_old(path, f, size)
    if t is None:
        return None
    return report(t, loader=LOADER)


def _is_pt2(path: str, f: IO[bytes], size: int, tz: TorchZip) -> bool:
    try:
        return pt2.is_pt2(tz, _records(path, f, size))
    except CorruptCheckpointError:   # an archive_format record torch cannot extract: torch.export.load raises
        return False
