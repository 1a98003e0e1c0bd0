"""`ckptstat scan` of a Keras 2 SavedModel's `keras_metadata.pb` (tf_keras `model.save(folder, save_format="tf")`):
what `tf_keras.models.load_model(folder)` runs while it rebuilds the model.

The file is a SavedMetadata protobuf (tf_keras/protobuf/saved_metadata.proto: nodes 1, each a SavedObject with
node_path 3 and metadata 5, the layer's JSON config). tf_keras revives each layer from that config in its legacy
format (tf_keras/src/saving/legacy/saved_model/load.py): a `Lambda` layer's function is marshalled Python bytecode
that it rebuilds and calls while it rebuilds the model, with no safe_mode (measured with tf_keras 2.21:
fixtures/make_keras_saved_model.py). Class names resolve among Keras' own and the caller's registered objects; a
config's `module` is not imported (measured: the layer is then revived from its traced functions instead). So a
Lambda (or `__lambda__` function) anywhere in a node's config is a finding. A `TFOpLambda` (or `SlicingOpLambda`)
layer calls the TensorFlow API function its config names (`tf.` + `function`, any exported symbol: a red-team run
made one `io.read_file`, measured reading a file when the model was called): one under a namespace that reaches files,
the network, Python or native code (TF_API_REACHING) is a finding; the arithmetic ops such layers ordinarily hold
(`math.add`, `reshape`, `__operators__.getitem`...) are not.
The graphs beside it in `saved_model.pb` are judged by analysis/scan/saved_model.py."""
from __future__ import annotations

from typing import IO, Any

from ...core.limits import limits
from ...errors import CorruptCheckpointError
from ...formats.tf_bundle.wire import Bad, fields, message
from .keras import PastBounds, config_findings, load_config
from .saved_model import listed
from .torch_load import plain_report

NAME = "keras_metadata.pb"
# tf.* namespaces and functions whose calls reach files, servers, Python or native code (the TF 2.21 API's)
TF_API_REACHING = ("io.", "data.", "summary.", "debugging.", "raw_ops.", "compat.", "saved_model.", "train.",
                   "experimental.", "config.", "distribute.", "tpu.", "profiler.", "keras.", "lookup.", "autograph.",
                   "sysconfig.", "feature_column.", "print", "py_function", "numpy_function", "load_op_library",
                   "load_library", "random.fixed_unigram_candidate_sampler", "nn.fixed_unigram_candidate_sampler",
                   "rpc_", "lite.", "mlir.", "test.", "d_tensor", "import_graph_def", "xla_", "__internal__.")
OP_LAMBDAS = ("TFOpLambda", "SlicingOpLambda")
LOADER = "tf_keras.models.load_model"
FORMAT = "Keras 2 SavedModel metadata"
RUNS = f"its function is marshalled Python bytecode, which {LOADER} rebuilds and calls as it rebuilds the model"
HOW = f"not torch.load's: {LOADER} rebuilds the layers from this metadata (a Lambda's function runs then: no safe_mode)"


def _op_lambdas(config: object) -> list[tuple[str, str]]:
    """(class, function) of every TFOpLambda / SlicingOpLambda in a config, walked without recursion (load_config
    bounds the values)."""
    out, stack = [], [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            inner = node.get("config")
            if node.get("class_name") in OP_LAMBDAS and isinstance(inner, dict) and isinstance(inner.get("function"), str):
                out.append((str(node["class_name"]), inner["function"]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def judge_keras_metadata(path: str, f: IO[bytes], size: int) -> dict[str, Any]:
    """The scan report of a `keras_metadata.pb` (see the module doc): Lambda bytecode and TFOpLambdas reaching files,
    servers or code as findings (saved_model.listed: the first thousand listed, the rest counted)."""
    cap = limits().index_bytes
    if size > cap:
        unread = f"{NAME} is {size:,} bytes, more than the {cap:,} scan reads (--limit index_bytes=N): its layers unread"
        return plain_report(path, FORMAT, HOW, [], [], [unread], [], f"SUSPICIOUS: {unread}")
    f.seek(0)
    raw = f.read(size)
    findings: list[dict[str, Any]] = []
    nodes = 0
    try:
        for num, _, node in fields(raw):
            if num != 1:                                                # SavedMetadata.nodes
                continue
            nodes += 1
            parts = {n: v for n, _, v in fields(message(node, "saved object"))}
            where = f"{NAME}: {message(parts.get(3, b'?'), 'node path').decode('utf-8', 'replace')[:80]}"
            config = load_config(message(parts.get(5, b"{}"), "metadata"), where, path)
            findings += [{"record": where, "offset": 0, "file_offset": None, "opcode": "Lambda",
                          "global": f"{k.where}: {k.what}", "why": RUNS}
                         for k in config_findings(config, where, path) if k.kind == "bytecode"]
            findings += [{"record": where, "offset": 0, "file_offset": None, "opcode": "TFOpLambda",
                          "global": f"{where}: {cls} calling tf.{function[:80]}",
                          "why": f"{LOADER} rebuilds the layer, which calls tf.{function[:80]} when the model runs"}
                         for cls, function in _op_lambdas(config) if function.startswith(TF_API_REACHING)]
    except PastBounds as e:
        return plain_report(path, FORMAT, HOW, [], [], [e.reason], [], f"UNKNOWN: {e.reason}")
    except (Bad, UnicodeDecodeError, ValueError) as e:
        raise CorruptCheckpointError(path, f"not a Keras SavedModel metadata file ({str(e)[:120]})") from None
    if not nodes:
        raise CorruptCheckpointError(path, "a keras_metadata.pb without a layer: not a Keras SavedModel metadata file")
    notes = [f"{nodes:,} layers and objects described"]
    if not findings:
        return plain_report(path, FORMAT, HOW, [], [], [], notes, "safe: no Lambda layer, __lambda__ function or "
                            "TFOpLambda reaching files, servers or code in the layers' configs (their module names "
                            "are not imported by tf_keras' legacy revival)")
    kinds = sorted({"keras Lambda (marshalled bytecode)" if fd["opcode"] == "Lambda" else "keras TFOpLambda "
                    "reaching files, servers or code" for fd in findings})
    return plain_report(path, FORMAT, HOW, listed(findings, notes), kinds, [], notes,
                        f"UNSAFE: {LOADER} would run the Python bytecode, or the TensorFlow functions, of: "
                        + "; ".join(fd["global"] for fd in findings[:4])
                        + (f" ... ({len(findings)} in all)" if len(findings) > 4 else ""))
