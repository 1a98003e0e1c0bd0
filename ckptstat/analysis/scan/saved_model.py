"""`ckptstat scan` of a TensorFlow SavedModel's `saved_model.pb`: the operations `tf.saved_model.load` (and Keras 2's
`load_model` of a SavedModel folder) restores, read from the protobuf without TensorFlow
(tensorflow/core/protobuf/saved_model.proto, meta_graph.proto; framework/graph.proto, function.proto, node_def.proto).

A SavedModel holds no pickle: its functions are TensorFlow graphs whose ops are TensorFlow's own kernels. What can
reach outside the model is an op that touches the file system or the network. Every NodeDef of every MetaGraphDef's
graph and of its function library is read by op (they run when their function runs: at load for the initializers,
or when the restored model is called):

- FILE_OPS are findings wherever they are (the queue readers, the tf.data service's and RPC's network ops, the
  tensor dumps...);
- PATH_INPUTS are the ops that read, write or list files at a path a tensor gives (ReadFile, WriteFile,
  MatchingFiles, SaveV2 and MergeV2Checkpoints at the variables folder, InitializeTableFromTextFileV2 at an asset,
  TextLineDataset of a signature's input): each is a finding only where the graph itself chooses the path (a
  constant, a captured constant, a constant passed to another function, a TF1 tensor the loader feeds only to the
  saver or the asset tables, used elsewhere: analysis/scan/tf_graph.py follows it); an in-memory cache's empty
  name is none, any other empty name a path relative to the loading process's folder;
- URL_ATTRS: ops whose attribute names a file or server (PrintV2's `file://` output stream, the Debug ops'
  `debug_urls`, DecodeProtoV2's `descriptor_source` file, FixedUnigramCandidateSampler's `vocab_file`);
- an AssetFileDef whose filename is absolute or climbs out (the loader joins it onto `assets/`) is a finding.

Every function is judged (the TF2 loader restores them all); a top-level op only where a loader runs it (the saver's
save and restore ops, the init op or the default local init op's collections, the signatures' outputs, followed back
through their inputs: tf_graph.Flow.runs), so a TF1 script's own Saver, left in the graph beside the export's, is not.

Python callbacks (PyFunc, EagerPyFunc) call a function registered in the loading process, which the file cannot
bring: noted. DatasetFromGraph builds a dataset from a GraphDef held in a tensor, whose ops are not read: unknown.
"""
from __future__ import annotations

from collections import Counter
from typing import IO, Any

from ...core.limits import limits
from ...errors import CorruptCheckpointError
from ...formats.tf_bundle.wire import Bad, fields, message
from .tf_graph import Flow, Node, Scope, attr_strings
from .torch_load import plain_report

NAME = "saved_model.pb"
LOADER = "tf.saved_model.load"
# op -> what it does with the file system or the network (tensorflow/core/ops/io_ops.cc, logging_ops.cc,
# summary_ops.cc, dataset_ops.cc, experimental_dataset_ops.cc, data_service_ops.cc; array_ops.cc ImmutableConst)
_QUEUE = "reads the files a queue names"
_SERVICE = "connects to the tf.data service at the address a graph tensor names"
_RPC = "serves or calls remote procedures at the address a graph tensor names (network)"
FILE_OPS = {
    "ImmutableConst": "memory-maps the file its memory_region_name names",
    "WholeFileReader": _QUEUE, "WholeFileReaderV2": _QUEUE, "TextLineReader": _QUEUE, "TextLineReaderV2": _QUEUE,
    "TFRecordReader": _QUEUE, "TFRecordReaderV2": _QUEUE, "FixedLengthRecordReader": _QUEUE,
    "FixedLengthRecordReaderV2": _QUEUE, "LMDBReader": _QUEUE,
    "RecordInput": "reads the files its file_pattern matches",
    "CreateSummaryFileWriter": "writes event files into the folder a graph tensor names",
    "CreateSummaryDbWriter": "writes the SQLite database a graph tensor names",
    "DatasetToTFRecord": "writes a TFRecord file a graph tensor names",
    "ExperimentalDatasetToTFRecord": "writes a TFRecord file a graph tensor names",
    "FileSystemSetConfiguration": "changes the configuration of a file system (an S3 or GCS endpoint, credentials)",
    "DataServiceDataset": _SERVICE, "DataServiceDatasetV2": _SERVICE, "DataServiceDatasetV3": _SERVICE,
    "DataServiceDatasetV4": _SERVICE, "RegisterDataset": _SERVICE, "RegisterDatasetV2": _SERVICE,
    "DistributedSave": _SERVICE,
    "RpcServer": _RPC, "RpcClient": _RPC, "RpcServerStart": _RPC, "RpcServerRegister": _RPC, "RpcCall": _RPC,
    "DumpTensor": "writes the tensors it sees into the folder its log_dir_path names",
    "CalibrationStatisticsSaver": "writes statistics into the file its output_file_path names",
}
# op -> (the inputs that are paths, what it does there): a finding where the graph chooses the path (module doc)
_CKPT_W, _CKPT_R, _READS = "writes a checkpoint at", "reads a checkpoint at", "reads the files"
PATH_INPUTS = {
    "ReadFile": ((0,), "reads the file"), "WriteFile": ((0,), "writes the file"),
    "MatchingFiles": ((0,), "lists the files matching"),
    "SaveV2": ((0,), _CKPT_W), "Save": ((0,), _CKPT_W), "SaveSlices": ((0,), _CKPT_W),
    "MergeV2Checkpoints": ((0, 1), "merges checkpoints, deleting the merged ones and their folders, at"),
    "RestoreV2": ((0,), _CKPT_R), "Restore": ((0,), _CKPT_R), "RestoreSlice": ((0,), _CKPT_R),
    "LoadAndRemapMatrix": ((0,), _CKPT_R), "GenerateVocabRemapping": ((0, 1), "reads the vocabulary files"),
    "InitializeTableFromTextFile": ((1,), "reads the table file"),
    "InitializeTableFromTextFileV2": ((1,), "reads the table file"),
    "TextLineDataset": ((0,), _READS), "TFRecordDataset": ((0,), _READS), "TFRecordDatasetV2": ((0,), _READS),
    "FixedLengthRecordDataset": ((0,), _READS), "FixedLengthRecordDatasetV2": ((0,), _READS),
    "CSVDataset": ((0,), _READS), "CSVDatasetV2": ((0,), _READS), "ExperimentalCSVDataset": ((0,), _READS),
    "LMDBDataset": ((0,), _READS), "ExperimentalLMDBDataset": ((0,), _READS),
    "MatchingFilesDataset": ((0,), "lists the files matching"),
    "ExperimentalMatchingFilesDataset": ((0,), "lists the files matching"),
    "SqlDataset": ((1,), "opens (creating it if missing) the database"),
    "ExperimentalSqlDataset": ((1,), "opens (creating it if missing) the database"),
    "SaveDataset": ((1,), "writes a dataset at"), "SaveDatasetV2": ((1,), "writes a dataset at"),
    "LoadDataset": ((0,), "reads a saved dataset at"),
    "SnapshotDataset": ((1,), "writes and reads a snapshot at"),
    "SnapshotDatasetV2": ((1,), "writes and reads a snapshot at"),
    "SnapshotChunkDataset": ((0,), _READS), "SnapshotDatasetReader": ((0,), _READS),
    "ListSnapshotChunksDataset": ((0,), _READS),
    "CacheDataset": ((1,), "writes its cache files at"), "CacheDatasetV2": ((1,), "writes its cache files at"),
}
_DEBUG = ("debug_urls", "sends its tensors to")
URL_ATTRS = {
    "PrintV2": ("output_stream", "appends to the file"),
    "DebugIdentity": _DEBUG, "DebugIdentityV2": _DEBUG, "DebugIdentityV3": _DEBUG, "DebugNanCount": _DEBUG,
    "DebugNumericSummary": _DEBUG,
    "DecodeProtoV2": ("descriptor_source", "reads the descriptor set file"),
    "EncodeProto": ("descriptor_source", "reads the descriptor set file"),
    "FixedUnigramCandidateSampler": ("vocab_file", "reads the vocabulary file"),
}
IN_MEMORY = ("CacheDataset", "CacheDatasetV2")   # an empty file name: the cache is kept in memory
MAX_FINDINGS = 1_000


def listed(findings: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """The first MAX_FINDINGS findings, with a note counting the rest (a file's every kind stays in its verdict)."""
    if len(findings) > MAX_FINDINGS:
        notes.append(f"{len(findings) - MAX_FINDINGS:,} more findings not listed")
    return findings[:MAX_FINDINGS]

CALLBACKS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def _url_finding(op: str, node: Node) -> str:
    """What an op of URL_ATTRS does with the file or server its attribute names ("" when it names none)."""
    attr, does = URL_ATTRS[op]
    values = attr_strings(node.attrs.get(attr, b""))
    if op == "PrintV2":
        values = [v[7:] for v in values if v.startswith("file://")]
    elif attr == "descriptor_source":
        values = [v for v in values if v != "local://" and not v.startswith("bytes://")]
    return f"{does} {', '.join(repr(v[:80]) for v in values[:3])}" if values else ""


def _path_finding(flow: Flow, scope: Scope, name: str, node: Node) -> str:
    """What an op of PATH_INPUTS does where the graph chooses its path ("" where the caller does)."""
    positions, does = PATH_INPUTS[node.op]
    chosen = flow.chosen(scope, name, node, positions)
    if not chosen or (node.op in IN_MEMORY and all(o == ("literal", "") for o in chosen)):
        return ""
    named = list(dict.fromkeys(repr(what[:120]) if kind == "literal" else what for kind, what in chosen))
    return f"{does} {', '.join(named[:3])}" + (f" (and {len(named) - 3} more)" if len(named) > 3 else "") + \
        ", a path the graph chooses"


def _judge_meta_graph(meta: bytes, index: int, ops: Counter[str], findings: list[dict[str, Any]],
                      unknown: list[str]) -> None:
    flow = Flow(meta)
    record = f"{NAME}: meta graph {index}"

    def finding(name: str, why: str, where: str) -> None:
        findings.append({"record": record, "offset": 0, "file_offset": None, "opcode": "op", "global": name,
                         "why": f"{LOADER}{where} {why}"})

    for scope in flow.scopes.values():
        where = f"'s function {scope.name[:80]!r} runs it: it" if scope.name else "'s graph runs it: it"
        for name, node in scope.nodes.items():
            op = node.op
            ops[op] += 1
            if not scope.name and name not in flow.runs:     # a top-level op no loader runs (a TF1 script's own saver)
                continue
            why = FILE_OPS.get(op) or (_path_finding(flow, scope, name, node) if op in PATH_INPUTS else "") or \
                (_url_finding(op, node) if op in URL_ATTRS else "")
            if why:
                finding(f"tf op {op}", why, where)
            elif op == "DatasetFromGraph" and len(unknown) < 10:
                unknown.append(f"{record}: DatasetFromGraph builds a dataset from a GraphDef a tensor holds; its ops "
                               "are not read")
    for name in flow.outside_assets():
        finding("tf asset outside the folder", f"reads the asset file {name[:120]!r}, outside the SavedModel's "
                "assets/ (the loader joins the name onto it)", "")


def judge_saved_model(path: str, f: IO[bytes], size: int) -> dict[str, Any]:
    """The scan report of a `saved_model.pb` (see the module doc): no pickle, the file-system and network ops as findings."""
    cap = limits().index_bytes
    if size > cap:   # unknown, never an error: a folder scan lists only what it can judge or not rule out
        unread = f"{NAME} is {size:,} bytes, more than the {cap:,} scan reads (--limit index_bytes=N): its ops unread"
        return plain_report(path, "TensorFlow SavedModel", f"not torch.load's: {LOADER} restores the graphs' functions",
                            [], [], [unread], [], f"SUSPICIOUS: {unread}")
    f.seek(0)
    raw = f.read(size)
    ops: Counter[str] = Counter()
    findings: list[dict[str, Any]] = []
    unknown: list[str] = []
    try:
        metas = [message(meta, "meta graph") for num, _, meta in fields(raw) if num == 2]   # SavedModel.meta_graphs
        for index, meta in enumerate(metas):
            _judge_meta_graph(meta, index, ops, findings, unknown)
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
    findings = listed(findings, notes)   # every kind is in `unsafe`; a graph of 200,000 WriteFiles lists 1,000
    return plain_report(
        path, "TensorFlow SavedModel", f"not torch.load's: {LOADER} restores the graphs' functions; their ops run when "
        "the functions do", findings, unsafe, unknown, notes,
        f"UNSAFE: {LOADER}'s functions would run file-system or network ops: " + ", ".join(unsafe) if unsafe else
        f"SUSPICIOUS: {unknown[0]}" if unknown else
        "safe: no op of the graphs or their functions reads or writes a file, or reaches a server, the graph names")
