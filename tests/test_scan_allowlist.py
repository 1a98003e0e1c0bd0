"""The pickle allowlist equals torch 2.15's weights_only unpickler (issue 15; read against the installed torch,
2.13 in the test install, through allowlist.py's record of what changed since: `allowed_in`), tested by loading the same
pickles with torch: one torch.save zip per global whose data.pkl is only `PROTO 2, GLOBAL module name,
STOP` (torch.load returns the global itself: nothing is called), for every global torch allows and near
misses, loaded with torch.load(weights_only=True) in a subprocess. `is_allowed`, scan's
`weights_only_loadable` and torch must agree on each; the reader's unpickler accepts what torch accepts.
And the tables in allowlist.py are read against torch's own source of them."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")

from ckptstat.analysis.scan.torch_load import scan  # noqa: E402
from ckptstat.formats.torch.allowlist import (  # noqa: E402
    ALLOWED_GLOBALS,
    DEFAULT_SAFE_GLOBALS,
    DENIED_MODULES,
    REMOVED,
    REMOVED_SAFE,
    STORAGE_ITEMSIZE,
    TORCH_IMPORT_MAPPING,
    TORCH_NAME_MAPPING,
    allowed_in,
    is_allowed,
)
from ckptstat.formats.torch.data_classes import PLAIN_DATA  # noqa: E402
from ckptstat.formats.torch.pickle_walk import WEIGHTS_ONLY_OPS  # noqa: E402

# Near misses: builtins torch does not allow, names one letter off, other modules' look-alikes,
# Python 2 names (mapped as torch maps them), the denied modules.
NEAR_MISSES = [
    "builtins.frozenset", "builtins.slice", "builtins.range", "builtins.dict", "builtins.list", "builtins.tuple",
    "builtins.bytes", "builtins.str", "builtins.int", "builtins.float", "builtins.getattr", "builtins.eval",
    "builtins.exec", "builtins.print", "builtins.object", "builtins.type", "collections.defaultdict",
    "collections.deque", "collections.namedtuple", "collections.OrderedDic", "torch.FloatStorag", "torch.float",
    "torch.long", "torch.half", "torch.cfloat", "torch.Storage", "torch.ByteTensorx", "torch.nn.Parameter",
    "torch.nn.parameter.Buffer", "torch.tensor", "torch.load", "torch.save", "torch.from_file", "torch.storage._load_from_bytes",
    "torch._utils._rebuild_tensor_v4", "torch._utils._rebuild_xla_tensor", "torch._utils._element_size",
    "torch._tensor._rebuild_from_type", "torch.tensor._rebuild_from_type_v2", "torch.serialization.load",
    "torch.serialization._get_restore_location", "torch.nn.modules.linear.Linear", "torch.optim.adam.Adam",
    "torch.distributed._mesh_layout._Layout", "torch.nested._internal.nested_tensor.NestedTensorx",
    "numpy.core.multiarray._reconstruct", "numpy.dtype", "_codecs.decode", "codecs.encode", "copyreg._reconstructor",
    "copy_reg._reconstructor", "__builtin__.set", "__builtin__.bytearray", "__builtin__.complex",
    "__builtin__.xrange", "__builtin__.intern", "__builtin__.long", "__builtin__.unicode", "UserDict.UserDict",
    "os.system", "posix.system", "nt.system", "sys.exit", "os.path.join", "subprocess.Popen", "pickle.loads",
    "torch.cuda.BoolTensor", "torch.cuda.sparse.FloatTensor", "torch.sparse.BoolTensor", "torch.cuda.QInt8Storage",
    "torch.bits8", "torch.uint8x", "torch.int8", "torch.uint7", "torch.int1", "torch.float4_e2m1fn_x2",
]
GLOBALS = (sorted(ALLOWED_GLOBALS | DEFAULT_SAFE_GLOBALS | set(REMOVED) | set(REMOVED_SAFE))
           + [n for n in NEAR_MISSES if n not in ALLOWED_GLOBALS])
# The installed torch's release, and the names its allowlist and ckptstat's (torch 2.15's) differ on.
_MAJOR, _MINOR = torch.__version__.split("+")[0].split(".")[:2]
INSTALLED, INSTALLED_SAFE = allowed_in((int(_MAJOR), int(_MINOR)))
DIFFER = (ALLOWED_GLOBALS | DEFAULT_SAFE_GLOBALS) ^ (INSTALLED | INSTALLED_SAFE)


def torch_accepts(name: str) -> bool:
    """What the installed torch's weights_only accepts, by the table: ckptstat's, but for the names that changed."""
    return name in INSTALLED | INSTALLED_SAFE if name in DIFFER else is_allowed(name)

LOADER = """
import json, sys, warnings, torch
warnings.simplefilter("ignore")
out = {}
for path in sys.argv[1:]:
    try:
        torch.load(path, weights_only=True)
        out[path] = None
    except BaseException as e:
        out[path] = f"{type(e).__name__}: {e}"   # (whole: torch names the opcode it stops at deep in its text)
print(json.dumps(out))
"""


def _template() -> list[tuple[str, bytes]]:
    buf = io.BytesIO()
    torch.save({}, buf)
    z = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    return [(i.filename, z.read(i)) for i in z.infolist()]


def _torch_zip(path: str, template: list[tuple[str, bytes]], data_pkl: bytes) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in template:
            z.writestr(name, data_pkl if name.endswith("/data.pkl") else data)


def _global_pickle(name: str, stack: bool = False) -> bytes:
    module, _, attr = name.rpartition(".")
    if not stack:
        return b"\x80\x02c" + f"{module}\n{attr}\n".encode() + b"."
    m, a = module.encode(), attr.encode()
    return b"\x80\x04\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(a)]) + a + b"\x93."


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict[str, tuple[str, str | None]]:
    folder = tmp_path_factory.mktemp("allowlist")
    template = _template()
    paths = {}
    for i, name in enumerate(GLOBALS):
        p = str(folder / f"g{i}.pt")
        _torch_zip(p, template, _global_pickle(name))
        paths[name] = p
    proc = subprocess.run([sys.executable, "-c", LOADER, *paths.values()], cwd=folder, timeout=300,
                          capture_output=True, text=True)
    torch_says = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: (p, torch_says[p]) for name, p in paths.items()}


def test_table_has_every_allowed_global_and_near_misses(table):
    accepted = [n for n, (_, err) in table.items() if err is None]
    assert len(accepted) >= len(ALLOWED_GLOBALS) and len(table) - len(accepted) >= 50


def test_allowlist_equals_torch_weights_only(table):
    wrong = []
    for name, (path, err) in table.items():
        torch_ok = err is None
        r = scan(path)
        if not (torch_ok == torch_accepts(name) and is_allowed(name) == r["weights_only_loadable"]):
            wrong.append((name, torch_ok, is_allowed(name), r["weights_only_loadable"], err))
    assert not wrong, wrong


def test_scan_verdict_for_each_global(table):
    """weights_only=False imports the global: scan calls it safe exactly when torch would accept it, or it is plain
    data (the near misses `builtins.dict`, `numpy.dtype`...: data_classes.PLAIN_DATA), listed as such (protocol 2 maps
    Python 2 names as both unpicklers do)."""
    for name, (path, _) in table.items():
        # torch.load (not weights_only) reads module torch.tensor as torch._tensor (load_module_mapping), and
        # turns any known *Storage name into a storage type without importing its module
        allowed = is_allowed(name.replace("torch.tensor.", "torch._tensor.")) or name.rpartition(".")[2] in STORAGE_ITEMSIZE
        r = scan(path)
        effective = [g["name"] for g in r["globals"]]
        plain = not allowed and effective[0] in PLAIN_DATA
        assert r["would_run_code"] == (not allowed and not plain), (name, r["verdict"])
        assert r["unsafe_globals"] == ([] if allowed or plain else effective), name
        assert r["plain_data_globals"] == (effective if plain else []), name


def test_the_reader_accepts_what_torch_accepts(table):
    """The reader's restricted unpickler (what `ckptstat summary` runs) refuses a global torch refuses;
    a global torch accepts gets as far as the tensor walk (the file holds no tensor)."""
    from ckptstat import open_checkpoint
    from ckptstat.errors import CheckpointError, UnsafeCheckpointError

    for name, (path, err) in table.items():
        try:
            open_checkpoint(path)
            refused = False
        except UnsafeCheckpointError:
            refused = True
        except CheckpointError:
            refused = False       # accepted by name; what a bare global builds is then refused otherwise
        assert refused == (not is_allowed(name)) and refused == ((err is not None) != (name in DIFFER)), (name, err)


def test_stack_global_is_refused_by_weights_only(tmp_path):
    """torch's weights_only unpickler reads a subset of protocol 2's opcodes: a STACK_GLOBAL (protocol 4), even
    of an allowed global, is refused; without weights_only it imports nothing outside the allowlist."""
    template = _template()
    names = ["collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "builtins.exec"]
    paths = []
    for i, name in enumerate(names):
        p = str(tmp_path / f"s{i}.pt")
        _torch_zip(p, template, _global_pickle(name, stack=True))
        paths.append(p)
    proc = subprocess.run([sys.executable, "-c", LOADER, *paths], cwd=tmp_path, timeout=120, capture_output=True, text=True)
    torch_says = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, p in zip(names, paths):
        r = scan(p)
        assert torch_says[p] is not None and not r["weights_only_loadable"], name
        assert r["would_run_code"] == (name == "builtins.exec"), name


def test_tables_match_torch_source():
    """allowlist.py's tables, read against the torch installed (2.13 in the test install; 2.15 has them as they are)."""
    import torch._weights_only_unpickler as wou
    from torch._utils import IMPORT_MAPPING, NAME_MAPPING
    from torch.storage import _storage_type_to_dtype_map

    assert set(wou._get_allowed_globals()) == INSTALLED
    # what torch registers itself, in a process no test has added safe globals to
    fresh = subprocess.run([sys.executable, "-c", "import json, torch, torch._weights_only_unpickler as w; "
                            "print(json.dumps(sorted(w._get_user_allowed_globals())))"],
                           capture_output=True, text=True, timeout=120)
    assert set(json.loads(fresh.stdout)) == INSTALLED_SAFE
    assert set(wou._blocklisted_modules) == DENIED_MODULES
    assert IMPORT_MAPPING == TORCH_IMPORT_MAPPING and NAME_MAPPING == TORCH_NAME_MAPPING
    assert {k: torch._utils._element_size(v) for k, v in _storage_type_to_dtype_map().items()} == STORAGE_ITEMSIZE
    # the opcodes its Unpickler.load handles are the pickle constants the module imports
    imported = {v[0] for k, v in vars(wou).items() if k.isupper() and isinstance(v, bytes) and len(v) == 1}
    assert imported == set(WEIGHTS_ONLY_OPS)


def test_every_torch_fixture_scans_safe():
    """No false alarm on the real torch.save outputs committed in fixtures/ (zip and legacy, training
    checkpoints with optimizer state, tied storages, every dtype): each loadable with weights_only, but DeepSpeed's
    ZeRO optimizer states (written by deepspeed 0.19.8, fixtures/make_training.py), which name DeepSpeed's own
    classes and are judged by DeepSpeed's loader (analysis/scan/loaders.py OWN_LOADERS), and the training checkpoints
    naming plain-data classes (fixtures/make_torch_training_data.py) and TRL's training_args.bin (fixtures/trl), which
    torch.load(weights_only=True) refuses: safe, the plain data named (docs/torch.md "ckptstat scan")."""
    from ckptstat.analysis.scan import scan_local
    from ckptstat.analysis.scan.loaders import DEEPSPEED_OPTIM

    root = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    found = deepspeed = 0
    for folder, _, names in os.walk(root):
        for n in names:
            if n.endswith((".pt", ".pth", ".bin", ".ckpt")):
                p = os.path.join(folder, n)
                with open(p, "rb") as f:
                    head = f.read(4)
                if head[:2] not in (b"PK", b"\x80\x02", b"\x80\x04", b"\x80\x05"):
                    continue      # a .bin of another format
                r = scan_local(p)
                if n.startswith("training-data") or n == "training_args.bin":   # (plain data: TRL's SFTConfig...)
                    assert r["status"] == "safe" and r["plain_data_globals"], (p, r["verdict"])
                    assert r["weights_only_loadable"] is False
                    continue
                own_loader = bool(DEEPSPEED_OPTIM.match(n))
                assert r["status"] == "safe" and r["weights_only_loadable"] is not own_loader, (p, r["verdict"])
                if own_loader:
                    assert scan(p)["status"] == "unsafe"   # for torch.load itself, DeepSpeed's classes are not allowed
                found += 1
                deepspeed += own_loader
    assert found >= 5 and deepspeed >= 2


def test_weights_only_loadable_follows_the_pickle_protocol(tmp_path):
    """torch.save(obj, f, pickle_protocol=N), zip and legacy: `weights_only_loadable` is what torch.load(weights_only=True)
    does in a fresh process, its refusal names the opcode torch stops at, and the verdict says so."""
    import pickletools
    from collections import OrderedDict

    objs = {"tensor": torch.arange(6.0).reshape(2, 3), "state_dict": OrderedDict(a=torch.zeros(3), b=torch.ones(2)),
            "with_bytes": {"w": torch.zeros(2), "b": b"ab", "l": [1, 2.5, None, True], "t": (1, "x")}}
    paths = []
    for proto in (2, 3, 4, 5):
        for zipped in (True, False):
            for name, obj in objs.items():
                p = str(tmp_path / f"{name}_p{proto}_{'zip' if zipped else 'legacy'}.pt")
                torch.save(obj, p, pickle_protocol=proto, _use_new_zipfile_serialization=zipped)
                paths.append(p)
    proc = subprocess.run([sys.executable, "-c", LOADER, *paths], cwd=tmp_path, timeout=300,
                          capture_output=True, text=True)
    torch_says = json.loads(proc.stdout.strip().splitlines()[-1])
    operand = {p: re.search(r"Unsupported operand (\d+)", e) for p, e in torch_says.items() if e is not None}
    names = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}
    refused = 0
    for p in paths:
        r = scan(p)
        assert r["status"] == "safe" and r["weights_only_loadable"] == (torch_says[p] is None), (p, torch_says[p])
        if torch_says[p] is None:
            assert r["weights_only_refusal"] is None and "weights_only=True" not in r["verdict"], p
            continue
        refused += 1
        assert operand[p] is not None, (p, torch_says[p])
        assert f"opcode {names[int(operand[p][1])]}," in r["weights_only_refusal"], (p, r["weights_only_refusal"])
        assert "torch.load(weights_only=True) refuses the file" in r["verdict"] and r["weights_only_refusal"] in r["verdict"]
    assert refused >= 2 * len(objs) * 2   # protocols 4 and 5 at least
