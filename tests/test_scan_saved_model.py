"""`ckptstat scan` of TensorFlow SavedModels (analysis/scan/saved_model.py, tf_graph.py), against what TensorFlow 2.21
wrote and did (fixtures/make_saved_model_ops.py, fixtures/expected_saved_model_ops.json: the ops TensorFlow's own
proto parser finds in each saved_model.pb; whether loading it and calling `serve` wrote a file outside, or read one,
each measured in fresh processes; the op registry's input and attribute names): the op set read without TensorFlow
is TensorFlow's, a SavedModel is unsafe exactly where TensorFlow touched a file outside it (a saver, an asset table,
an in-memory cache, a function writing at its caller's path and TF1's saver and asset tables stay safe), the tables
name ops and inputs TensorFlow registers; graphs built byte by byte for what a hostile file can do that TensorFlow
does not write (a path climbing out of the caller's, chains and loops of ops); a damaged saved_model.pb is one line."""
from __future__ import annotations

import json
import os
import shutil

from conftest import FIXTURES

from ckptstat.analysis.scan import saved_model, tf_graph
from ckptstat.analysis.scan.tf_graph import Flow
from ckptstat.formats.tf_bundle.wire import fields

ROOT = os.path.join(FIXTURES, "tf-saved-model-ops")
# the names TensorFlow's registry gives the inputs PATH_INPUTS reads as paths
PATH_NAMES = {"prefix", "filename", "file_pattern", "pattern", "checkpoint_prefixes", "destination_prefix", "filenames",
              "patterns", "data_source_name", "path", "snapshot_path", "chunk_file", "shard_dir", "ckpt_path",
              "new_vocab_file", "old_vocab_file"}


def _expected() -> dict:
    with open(os.path.join(FIXTURES, "expected_saved_model_ops.json")) as f:
        return json.load(f)


def test_the_ops_are_tensorflows():
    for case, o in _expected()["cases"].items():
        raw = open(os.path.join(ROOT, case, "saved_model.pb"), "rb").read()
        ops = {node.op for num, _, meta in fields(raw) if num == 2
               for scope in Flow(meta).scopes.values() for node in scope.nodes.values()}
        assert sorted(ops) == o["ops"], case


def test_unsafe_exactly_where_tensorflow_touched_a_file(cli):
    cases = _expected()["cases"]
    assert {c for c, o in cases.items() if not (o["writes"] or o["reads"])} >= {
        "plain", "cache_memory", "caller_path", "table_asset", "tf1_plain", "tf1_table_asset", "tf1_user_saver"}
    for case, o in cases.items():
        rc, out, _ = cli("scan", os.path.join(ROOT, case, "saved_model.pb"), "--json")
        r = json.loads(out)
        touched = o["writes"] or o["reads"]
        assert (rc, r["status"]) == ((1, "unsafe") if touched else (0, "safe")), (case, r["verdict"])
        for name in r["unsafe_globals"]:
            assert name == "tf asset outside the folder" or name.removeprefix("tf op ") in o["ops"], case


def test_the_tables_are_tensorflows_ops():
    registry = _expected()["registry"]
    named = set(saved_model.FILE_OPS) | set(saved_model.PATH_INPUTS) | set(saved_model.URL_ATTRS) | \
        tf_graph.ELEMENT_FNS | tf_graph.SAME_ELEMENTS | set(tf_graph.CALLS) | set(tf_graph.ALL_PARTS) | \
        set(tf_graph.PASS_FIRST)
    assert named <= set(registry)
    assert [op for op in sorted(registry) if registry[op] is None] == []
    for op in tf_graph.ELEMENT_FNS:
        assert registry[op]["inputs"][:2] == ["input_dataset", "other_arguments"] and "Targuments" in registry[op]["attrs"]
    for op in tf_graph.SAME_ELEMENTS:
        assert registry[op]["inputs"][0] == "input_dataset", op
    assert "separator" in registry["StringJoin"]["attrs"]
    for op, (positions, _) in saved_model.PATH_INPUTS.items():
        assert {registry[op]["inputs"][k] for k in positions} <= PATH_NAMES, op
    for op, (attr, _) in saved_model.URL_ATTRS.items():
        assert attr in registry[op]["attrs"], op


def test_folders_list_saved_models(tmp_path, cli):
    for case in ("write_file", "plain", "save_v2_captured", "table_asset"):
        shutil.copytree(os.path.join(ROOT, case), tmp_path / case)
    shutil.copytree(os.path.join(FIXTURES, "tf-saved-model"), tmp_path / "fixture")
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        os.path.join("write_file", "saved_model.pb"): "unsafe", os.path.join("plain", "saved_model.pb"): "safe",
        os.path.join("save_v2_captured", "saved_model.pb"): "unsafe",
        os.path.join("table_asset", "saved_model.pb"): "safe", os.path.join("fixture", "saved_model.pb"): "safe"}


def test_a_damaged_saved_model_is_one_line(tmp_path, cli):
    raw = open(os.path.join(ROOT, "write_file", "saved_model.pb"), "rb").read()
    bad = tmp_path / "saved_model.pb"
    bad.write_bytes(raw[: len(raw) // 2])
    rc, out, err = cli("scan", str(bad))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "not a SavedModel" in err


# graphs built byte by byte: the protobuf wire format (tensorflow/core/framework/node_def.proto, graph.proto,
# attr_value.proto, tensor.proto; protobuf/meta_graph.proto, saved_model.proto)

def _varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def _f(num: int, value: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def _attr(key: str, value: bytes) -> bytes:
    return _f(5, _f(1, key.encode()) + _f(2, value))


def _node(name: str, op: str, *inputs: str, attrs: bytes = b"") -> bytes:
    return _f(1, _f(1, name.encode()) + _f(2, op.encode()) + b"".join(_f(3, i.encode()) for i in inputs) + attrs)


def _const(name: str, text: str) -> bytes:
    return _node(name, "Const", attrs=_attr("value", _f(8, _f(8, text.encode()))))


def _saved_model(tmp_path, nodes: bytes, run: tuple[str, ...] = ("save",)) -> str:
    """A SavedModel of one meta graph whose main_op (a NoOp "main", collection saved_model_main_op) runs the ops
    `run` names: a top-level op the loader runs (one nothing runs is never judged)."""
    path = tmp_path / "saved_model.pb"
    main = _node("main", "NoOp", *(f"^{r}" for r in run))
    collection = _f(4, _f(1, b"saved_model_main_op") + _f(2, _f(1, _f(1, b"main"))))
    path.write_bytes(_f(2, _f(2, nodes + main) + collection))   # SavedModel.meta_graphs -> MetaGraphDef
    return str(path)


def _save_at(path_input: str) -> bytes:
    return _const("names", "x") + _const("slices", "") + _const("t", "") + \
        _node("save", "SaveV2", path_input, "names", "slices", "t")


def test_hostile_paths_joined_onto_the_callers(tmp_path, cli):
    separator = _attr("separator", _f(2, b"/.."))
    cases = {   # the SaveV2's path: is it the graph's choice
        "the caller's prefix and a literal": (_const("part", "_temp/part") + _node("p", "StringJoin", "fed", "part"), False),
        "a literal climbing out": (_const("up", "/../../../etc/cron.d/x") + _node("p", "StringJoin", "fed", "up"), True),
        "a climb split over two literals": (_const("a", "/.") + _const("b", "./x") + _node("p", "StringJoin", "fed", "a", "b"),
                                            True),
        "a separator climbing": (_const("c", "x") + _node("p", "StringJoin", "fed", "c", attrs=separator), True),
        "a literal first": (_const("root", "/tmp/x") + _node("p", "StringJoin", "root", "fed"), True),
        "an op's output after": (_node("n", "AsString", "fed") + _node("p", "StringJoin", "fed", "n"), True),
        "an empty name, sharded (a file in the loading process's folder)": (
            _const("e", "") + _const("i", "") + _node("p", "ShardedFilename", "e", "i", "i"), True),
    }
    for what, (nodes, unsafe) in cases.items():
        path = _saved_model(tmp_path, _node("fed", "Placeholder") + nodes + _save_at("p"))
        rc, out, _ = cli("scan", path, "--json")
        assert json.loads(out)["status"] == ("unsafe" if unsafe else "safe"), what


def test_chains_and_loops_of_ops(tmp_path, cli):
    chain = _const("i0", "/tmp/x") + b"".join(_node(f"i{k}", "Identity", f"i{k - 1}") for k in range(1, 5000))
    loop = _node("a", "Identity", "b") + _node("b", "Identity", "a")
    # each level joins the one before with itself: 2^60 origins if they were copied, not kept distinct
    packs = _const("d0", "/tmp/x") + b"".join(_node(f"d{k}", "Pack", f"d{k - 1}", f"d{k - 1}") for k in range(1, 60))
    joins = _const("j0", "/tmp/x") + b"".join(_node(f"j{k}", "StringJoin", f"j{k - 1}", f"j{k - 1}") for k in range(1, 60))
    wide = _const("w", "/tmp/x") + _node("pack", "Pack", *(["w"] * 200_000)) + \
        b"".join(_node(f"s{k}", "SaveV2", "pack", "names", "slices", "t") for k in range(2000))
    for nodes, start in ((chain, "i4999"), (loop, "a"), (packs, "d59"), (joins, "j59"), (wide, "pack")):
        runs = ("save",) + tuple(f"s{k}" for k in range(2000) if nodes is wide)
        rc, out, err = cli("scan", _saved_model(tmp_path, nodes + _save_at(start), runs), "--json")
        r = json.loads(out)
        assert (rc, r["status"], r["unsafe_globals"]) == (1, "unsafe", ["tf op SaveV2"]), err
        assert len(r["findings"]) <= saved_model.MAX_FINDINGS   # 2,000 SaveV2s: a thousand listed, the rest counted


def test_an_op_no_loader_runs_is_not_judged(tmp_path, cli):
    """A TF1 training script's own Saver stays in the graph its export writes (the export adds a second): its SaveV2
    at the relative 'model' runs under neither loader (a helper measured both); run by main_op, it writes there."""
    graph = _const("model", "model") + _save_at("model")
    for run, status in (((), "safe"), (("save",), "unsafe")):
        (tmp_path / status).mkdir()
        rc, out, err = cli("scan", _saved_model(tmp_path / status, graph, run), "--json")
        assert json.loads(out)["status"] == status, err


def test_a_tf1_saver_run_by_main_op_writes_at_its_default(tmp_path, cli):
    """The TF1 loader feeds the saver's file name only while the saver restores: a main_op that runs the saver's
    SaveV2 writes at the file name's saved default (a helper's case, TensorFlow-built in the fixtures as
    tf1_saver_feed_in_main_op; here the saver's scope the file names is its own, and main_op reaches it through a
    control input)."""
    graph = _const("save/default", "/tmp/x") + _node("save/Const", "PlaceholderWithDefault", "save/default") + \
        _const("save/names", "w") + _const("save/slices", "") + _const("save/t", "") + \
        _node("save/SaveV2", "SaveV2", "save/Const", "save/names", "save/slices", "save/t") + \
        _node("save/restore_all", "NoOp", "^save/SaveV2")
    saver = _f(3, _f(1, b"save/Const:0") + _f(3, b"save/restore_all"))
    main_op = _f(4, _f(1, b"saved_model_main_op") + _f(2, _f(1, _f(1, b"main"))))
    for run_by_main_op, status in ((False, "safe"), (True, "unsafe")):
        nodes = graph + (_node("main", "NoOp", "^save/SaveV2") if run_by_main_op else b"")
        path = tmp_path / f"{run_by_main_op}" / "saved_model.pb"
        path.parent.mkdir()
        path.write_bytes(_f(2, _f(2, nodes) + saver + (main_op if run_by_main_op else b"")))
        rc, out, err = cli("scan", str(path), "--json")
        assert json.loads(out)["status"] == status, (run_by_main_op, err)


# StructuredValues (tensorflow/core/protobuf/struct.proto): what a FunctionSpec and a concrete function's
# canonicalized_input_signature hold, built byte by byte for what TensorFlow does not write

def _sv(kind: int, *items: bytes) -> bytes:
    """A list (51) or tuple (52) of StructuredValues, a string (13) of one item's text, a tensor spec (33) of none."""
    return _f(kind, items[0] if kind == 13 else b"".join(_f(1, i) for i in items))


def _fullargspec(args: list[str], defaults: list[bytes], kwonly: dict[str, bytes] | None = None,
                 is_method: bool = False) -> bytes:
    pairs = {"args": _sv(51, *(_sv(13, a.encode()) for a in args)), "defaults": _sv(52, *defaults),
             "kwonlydefaults": _f(53, b"".join(_f(1, _f(1, k.encode()) + _f(2, v)) for k, v in (kwonly or {}).items()))}
    spec = _f(54, _f(1, b"FullArgSpec") + b"".join(_f(2, _f(1, k.encode()) + _f(2, v)) for k, v in pairs.items()))
    return _f(1, spec) + (b"\x10\x01" if is_method else b"")          # FunctionSpec: fullargspec 1, is_method 2


def test_python_defaults_by_argument():
    from ckptstat.analysis.scan.tf_defaults import argument_defaults
    spec, path = _sv(33), _sv(13, b"/tmp/x")
    signature = _sv(52, _sv(52, spec, spec), _f(53, b""))               # (args, kwargs)
    assert argument_defaults(_fullargspec(["x", "path"], [path]), signature, 2) == ({1: ["/tmp/x"]}, [])
    # a method's `self` is not passed; a default that is not text is no path
    assert argument_defaults(_fullargspec(["self", "x", "path"], [path], is_method=True), signature, 2) == \
        ({1: ["/tmp/x"]}, [])
    assert argument_defaults(_fullargspec(["x", "n"], [_f(12, b"")]), signature, 2) == ({}, [])
    # more defaults than arguments (Python never writes it): any of them for any argument
    assert argument_defaults(_fullargspec(["path"], [_sv(13, b"a"), path]), _sv(52, _sv(52, spec), _f(53, b"")), 1) \
        == ({0: ["a", "/tmp/x"]}, [])
    # a keyword-only default, by its name in the signature's kwargs
    kwargs = _f(53, _f(1, _f(1, b"path") + _f(2, spec)))
    assert argument_defaults(_fullargspec(["x"], [], {"path": path}), _sv(52, _sv(52, spec), kwargs), 2) == \
        ({1: ["/tmp/x"]}, [])
    # a tuple before the path counts its tensors; nesting past the bound, a composite type spec or a count that
    # differs from the function's arguments: every string default is taken for every argument
    assert argument_defaults(_fullargspec(["x", "s", "path"], [path]),
                             _sv(52, _sv(52, spec, _sv(52, spec, spec), spec), _f(53, b"")), 4) == ({3: ["/tmp/x"]}, [])
    deep = spec
    for _ in range(200):
        deep = _sv(52, deep)
    for before in (deep, _f(34, b""), spec):   # (the last: two tensors where the function takes three)
        got = argument_defaults(_fullargspec(["x", "path"], [path]), _sv(52, _sv(52, before, spec), _f(53, b"")), 3)
        assert got == ({}, ["/tmp/x"]), before[:8]


def test_many_functions_naming_one_with_many_defaults(tmp_path, cli):
    """5,000 function objects naming one concrete function of 2,000 arguments, each with its own string default that
    cannot be paired with an argument: the defaults kept are each function's distinct strings, at most MAX_ORIGINS an
    argument (they were copied onto every argument of every function: ten million list entries), and the WriteFile at
    an argument is still the graph's choice."""
    args = [f"a{i}" for i in range(2000)]
    signature = _f(1, b"f") + b"".join(_f(2, _f(1, a.encode())) for a in args)
    function = _f(1, signature) + _f(3, _f(1, b"w") + _f(2, b"WriteFile") + _f(3, b"a0") + _f(3, b"a1"))   # node_def
    graph = _f(2, _f(2, _f(1, function)))            # GraphDef.library -> FunctionDefLibrary.function
    objects = b"".join(_f(1, _f(6, _f(1, b"f") + _f(2, _fullargspec(["x"], [_sv(13, f"/tmp/{i}".encode())]))))
                       for i in range(5000))
    concrete = _f(2, _f(1, b"f") + _f(2, b""))       # no bound inputs, no input signature
    path = tmp_path / "saved_model.pb"
    path.write_bytes(_f(2, graph + _f(7, objects + concrete)))
    flow = Flow(next(v for n, _, v in fields(path.read_bytes()) if n == 2))   # SavedModel.meta_graphs
    assert len(flow.any_defaults["f"]) == tf_graph.MAX_ORIGINS
    rc, out, _ = cli("scan", str(path), "--json")
    assert json.loads(out)["status"] == "unsafe"
