"""The TF2 object graph (docs/formats.md section 4; tensorflow/core/protobuf/trackable_object_graph.proto):
a scalar string tensor under `_CHECKPOINTABLE_OBJECT_GRAPH` holding a serialized TrackableObjectGraph."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ...core.limits import limits
from .wire import Bad, fields, message, number, varint

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# Per node: its children (node id, local name) and the checkpoint keys of its attributes.
Node = tuple[list[tuple[int, str]], list[str]]


def string_scalar(raw: bytes) -> bytes:
    """A DT_STRING scalar's bytes: varint64 length, 4-byte masked crc32c of the lengths, the string."""
    n, pos = varint(raw, 0)
    if pos + 4 + n > len(raw):
        raise Bad(f"string tensor of {n} bytes runs past its {len(raw)}-byte entry")
    return raw[pos + 4:pos + 4 + n]


def object_graph(raw: bytes) -> list[Node]:
    """The nodes of the TrackableObjectGraph stored in the string tensor `raw` (field 1, repeated)."""
    nodes = []
    for num, _, node in fields(string_scalar(raw)):
        if num != 1:
            continue
        children, keys = [], []
        for n, _, v in fields(message(node, "object graph node")):
            if n == 1:     # ObjectReference: 1 node_id, 2 local_name
                ref = {a: b for a, _, b in fields(message(v, "object graph child"))}
                children.append((number(ref.get(1, 0), "child node_id"),
                                 message(ref.get(2, b""), "child local_name").decode("utf-8", "replace")))
            elif n == 2:   # SerializedTensor: 1 name, 2 full_name, 3 checkpoint_key
                attr = {a: b for a, _, b in fields(message(v, "object graph attribute"))}
                keys.append(message(attr.get(3, b""), "attribute checkpoint_key").decode("utf-8", "replace"))
        nodes.append((children, keys))
    return nodes


def model_paths(nodes: list[Node]) -> Iterator[tuple[str, str]]:
    """(checkpoint key, model path) for each variable keyed under `optimizer/` that is also reachable
    from the root without passing the optimizer. Keras 3 under tf.train.Checkpoint keys the model's
    variables by their first path in the graph, which runs through `optimizer/_trainable_variables/N`.

    Each node keeps its parent and depth, not its path (a chain of n nodes would cost n^2), and a
    path is spelled out only for a node that holds such a key and lies at most limits().tf_graph_depth
    deep (deeper ones keep TF's key)."""
    parent: dict[int, tuple[int, str, int]] = {0: (-1, "", 0)} if nodes else {}
    queue = deque(parent)
    while queue:                               # breadth first, as TF assigns keys
        node = queue.popleft()
        depth = parent[node][2]
        for child, local in nodes[node][0]:
            if child in parent or not 0 <= child < len(nodes) or (node == 0 and local == "optimizer"):
                continue
            parent[child] = (node, local, depth + 1)
            queue.append(child)
    max_depth = limits().tf_graph_depth
    for node, (_, keys) in enumerate(nodes):
        if node not in parent or parent[node][2] > max_depth:
            continue
        wanted = [k for k in keys if k.startswith("optimizer/") and k.endswith(VALUE_SUFFIX)]
        if not wanted:
            continue
        parts, at = [], node
        while at > 0:
            at, local, _ = parent[at]
            parts.append(local)
        path = "/".join(reversed(parts)) + VALUE_SUFFIX
        for key in wanted:
            yield key, path
