"""TensorFlow SavedModel folders (docs/saved_model.md; tensorflow/core/protobuf/
saved_model.proto, meta_graph.proto, saved_object_graph.proto).

A SavedModel is `saved_model.pb` (a SavedModel message: the graphs and the object graph) beside
`variables/variables.index` + `variables/variables.data-*`, an ordinary TF2 tensor bundle, which the
TF bundle reader (formats/tf_bundle) opens. Naming `saved_model.pb` or its folder opens that bundle.

From saved_model.pb only the SavedObjectGraph is read (SavedModel.meta_graphs 2 -> MetaGraphDef.
object_graph_def 7 -> SavedObjectGraph.nodes 1 -> SavedObject.variable 7 -> SavedVariable.trainable 3,
name 6). Its nodes are numbered as the bundle's TrackableObjectGraph nodes are (both come from one
walk of the object graph, tensorflow/python/saved_model/save.py), so a node's SavedVariable tells
whether the variable under that node's checkpoint key is trainable: noted on the tensor
(extra["trainable"]) and summarised in a note.
"""
from __future__ import annotations

import os
from dataclasses import replace

from ..core import Checkpoint
from ..core.files import check_inside, open_regular, regular
from ..core.io import read_bytes
from ..core.limits import limits
from ..errors import CheckpointError, CorruptCheckpointError
from .registry import _FILE_HOOKS
from .tf_bundle.graph import OBJECT_GRAPH_KEY, object_graph
from .tf_bundle.reader import open_bundle
from .tf_bundle.wire import Bad, fields, message

SAVED_MODEL = "saved_model.pb"
VARIABLES = os.path.join("variables", "variables.index")


def trainable_flags(raw: bytes) -> dict[int, tuple[bool, str]]:
    """SavedObjectGraph node id -> (trainable, variable name) for every node that is a variable."""
    out: dict[int, tuple[bool, str]] = {}
    for num, _, meta in fields(raw):
        if num != 2:                       # SavedModel.meta_graphs
            continue
        for n2, _, graph in fields(message(meta, "meta graph")):
            if n2 != 7:                    # MetaGraphDef.object_graph_def
                continue
            node_id = 0
            for n3, _, node in fields(message(graph, "object graph")):
                if n3 != 1:                # SavedObjectGraph.nodes
                    continue
                for n4, _, var in fields(message(node, "saved object")):
                    if n4 == 7:            # SavedObject.variable: SavedVariable
                        attrs = {a: b for a, _, b in fields(message(var, "saved variable"))}
                        trainable = attrs.get(3, 0)      # proto3 bool: absent means false
                        name = message(attrs.get(6, b""), "variable name").decode("utf-8", "replace")
                        out[node_id] = (bool(trainable), name)
                node_id += 1
        break                              # the first meta graph (tag "serve") holds the object graph
    return out


def open_saved_model(path: str) -> Checkpoint:
    folder = os.path.dirname(path)
    index = os.path.join(folder, VARIABLES)
    if not os.path.lexists(index):
        raise CheckpointError(path, f"SavedModel without {VARIABLES} (a model with no variables has no weights)")
    check_inside(index, "variables", path)
    regular(index, "variables")
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
    cap = limits().index_bytes
    if size > cap:
        raise CheckpointError(path, f"{SAVED_MODEL} is {size:,} bytes, more than the {cap:,} ckptstat reads "
                                    "(--limit index_bytes=N to raise it)")
    try:
        flags = trainable_flags(read_bytes(path, 0, size))
    except Bad as e:
        raise CorruptCheckpointError(path, f"not a SavedModel ({e})") from None
    ckpt = open_bundle(index)
    ckpt.files = (path, *ckpt.files)
    ckpt.format = "tf-bundle (SavedModel)"
    graph = ckpt.tensors.get(OBJECT_GRAPH_KEY)
    if graph is not None and graph.dtype == "STR" and graph.numel == 1 and flags:
        try:
            nodes = object_graph(read_bytes(graph.file, graph.offset or 0, graph.nbytes))
        except Bad as e:
            raise CorruptCheckpointError(index, str(e)) from None
        by_key = {str(t.extra.get("checkpoint_key", t.name)): t.name for t in ckpt}
        frozen = []
        for node_id, (trainable, var_name) in flags.items():
            if node_id >= len(nodes):
                continue
            for key in nodes[node_id][1]:
                name = by_key.get(key)
                if name is None:
                    continue
                info = ckpt.tensors[name]
                ckpt.editable()[name] = replace(info, extra={**info.extra, "trainable": trainable, "variable_name": var_name})
                if not trainable:
                    frozen.append(name)
        if frozen:
            ckpt.notes.append(f"SavedModel object graph: {len(frozen)} variable(s) not trainable: "
                              f"{', '.join(sorted(frozen)[:4])}{', ...' if len(frozen) > 4 else ''}")
    return ckpt


_FILE_HOOKS[SAVED_MODEL] = open_saved_model
