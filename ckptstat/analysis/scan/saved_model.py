"""`ckptstat scan` of a TensorFlow SavedModel's `saved_model.pb`: the operations `tf.saved_model.load` (and Keras 2's
`load_model` of a SavedModel folder) restores, read from the protobuf without TensorFlow
(tensorflow/core/protobuf/saved_model.proto, meta_graph.proto; framework/graph.proto, function.proto, node_def.proto).

A SavedModel holds no pickle: its functions are TensorFlow graphs whose ops are TensorFlow's own kernels. What can
reach outside the model is an op that touches the file system at a path the graph itself holds: every NodeDef of
every MetaGraphDef's graph and of its function library is read by op, and an op of FILE_OPS is a finding (it runs
when its function runs: at load for the initializers, or when the restored model is called). `PrintV2` is one only
when its `output_stream` is a `file://` path. The ops a saver uses (SaveV2, RestoreV2, MergeV2Checkpoints,
ShardedFilename...) take their path from the caller (the variables folder) and are not findings; Python callbacks
(PyFunc, EagerPyFunc) call a function registered in the loading process, which the file cannot bring: noted.
"""
from __future__ import annotations

from collections import Counter
from typing import IO, Any

from ...core.limits import limits
from ...errors import CorruptCheckpointError
from ...formats.tf_bundle.wire import Bad, fields, message
from .torch_load import plain_report

NAME = "saved_model.pb"
LOADER = "tf.saved_model.load"
# op -> what it does with the file system (tensorflow/core/ops/io_ops.cc, logging_ops.cc, summary_ops.cc,
# dataset_ops.cc; array_ops.cc ImmutableConst)
FILE_OPS = {
    "ReadFile": "reads the file a graph tensor names",
    "WriteFile": "writes the file a graph tensor names",
    "MatchingFiles": "lists the files a graph pattern matches",
    "ImmutableConst": "memory-maps the file its memory_region_name names",
    "WholeFileReader": "reads whole files named by a queue",
    "WholeFileReaderV2": "reads whole files named by a queue",
    "CreateSummaryFileWriter": "writes event files into the folder a graph tensor names",
    "DatasetToTFRecord": "writes a TFRecord file a graph tensor names",
    "ExperimentalDatasetToTFRecord": "writes a TFRecord file a graph tensor names",
}
CALLBACKS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def _nodes(graph: bytes) -> list[tuple[str, bytes]]:
    """(op, NodeDef bytes) of a GraphDef's nodes (1) and of its library's functions' node_def (2 -> 1 -> 3)."""
    out = []
    for num, _, value in fields(graph):
        if num == 1 and isinstance(value, bytes):
            out.append(value)
        elif num == 2 and isinstance(value, bytes):                  # GraphDef.library: FunctionDefLibrary
            for n2, _, fn in fields(message(value, "function library")):
                if n2 == 1 and isinstance(fn, bytes):                 # FunctionDef
                    out += [nd for n3, _, nd in fields(message(fn, "function")) if n3 == 3 and isinstance(nd, bytes)]
    ops = []
    for node in out:
        op = next((v for n, _, v in fields(node) if n == 2 and isinstance(v, bytes)), b"")   # NodeDef.op
        ops.append((op.decode("utf-8", "replace"), node))
    return ops


def _output_stream(node: bytes) -> str:
    """A PrintV2 NodeDef's `output_stream` attribute (NodeDef.attr 5: map entry key 1, AttrValue 2 -> s 2)."""
    for n, _, entry in fields(node):
        if n != 5 or not isinstance(entry, bytes):
            continue
        kv = {k: v for k, _, v in fields(entry)}
        value = kv.get(2)
        if kv.get(1) == b"output_stream" and isinstance(value, bytes):
            s = {k: v for k, _, v in fields(value)}.get(2)
            return s.decode("utf-8", "replace") if isinstance(s, bytes) else ""
    return ""


def judge_saved_model(path: str, f: IO[bytes], size: int) -> dict[str, Any]:
    """The scan report of a `saved_model.pb` (see the module doc): no pickle, the file-system ops as findings."""
    cap = limits().index_bytes
    if size > cap:   # unknown, never an error: a folder scan lists only what it can judge or not rule out
        unread = f"{NAME} is {size:,} bytes, more than the {cap:,} scan reads (--limit index_bytes=N): its ops unread"
        return plain_report(path, "TensorFlow SavedModel", f"not torch.load's: {LOADER} restores the graphs' functions",
                            [], [], [unread], [], f"SUSPICIOUS: {unread}")
    f.seek(0)
    raw = f.read(size)
    ops: Counter[str] = Counter()
    findings: list[dict[str, Any]] = []
    try:
        for index, (num, _, meta) in enumerate(fields(raw)):
            if num != 2 or not isinstance(meta, bytes):                # SavedModel.meta_graphs
                continue
            for n2, _, graph in fields(message(meta, "meta graph")):
                if n2 != 2 or not isinstance(graph, bytes):           # MetaGraphDef.graph_def
                    continue
                for op, node in _nodes(message(graph, "graph")):
                    ops[op] += 1
                    why = FILE_OPS.get(op)
                    stream = _output_stream(node) if op == "PrintV2" else ""
                    if stream.startswith("file://"):
                        why = f"appends to the file {stream[7:][:80]!r}"
                    if why:
                        findings.append({"record": f"{NAME}: meta graph {index}", "offset": 0, "file_offset": None,
                                         "opcode": "op", "global": f"tf op {op}",
                                         "why": f"{LOADER}'s functions run it: it {why}"})
    except Bad as e:
        raise CorruptCheckpointError(path, f"not a SavedModel ({e})") from None
    if not ops:
        raise CorruptCheckpointError(path, "a saved_model.pb without a graph: not a SavedModel")
    notes = [f"{sum(ops.values()):,} ops of {len(ops):,} kinds in the graphs and their functions"]
    callbacks = sorted(op for op in ops if op in CALLBACKS)
    if callbacks:
        notes.append(f"{', '.join(callbacks)}: a Python callback registered in the loading process by token (the file "
                     "brings no code; the op fails where none is registered)")
    unsafe = sorted({fd["global"] for fd in findings})
    return plain_report(
        path, "TensorFlow SavedModel", f"not torch.load's: {LOADER} restores the graphs' functions; their ops run when "
        "the functions do", findings, unsafe, [], notes,
        f"UNSAFE: {LOADER}'s functions would run file-system ops: " + ", ".join(unsafe) if unsafe else
        "safe: no op of the graphs or their functions reads or writes a file the graph names")
