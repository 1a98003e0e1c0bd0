"""Who chooses a path an op of a SavedModel touches: the caller (the loader, the user) or the file's own graph.

One MetaGraphDef (tensorflow/core/protobuf/meta_graph.proto) read from its wire bytes: the top-level graph's nodes,
each library function's nodes and arguments, where each function is called, and the object graph's concrete
functions with the objects bound to their last arguments (saved_object_graph.proto). `Flow.origins` follows a
node's input back to what produced it:

- the caller's: a Placeholder of the top-level graph (the signature's inputs, the saver's file name), the saver's
  `filename_tensor_name` (TF1: fed while the saver runs, so for a top-level op only the saver runs), a constant an
  AssetFileDef names (TF1: fed while the init op runs, so for a table initialiser only it runs), a function argument
  the user passes, or one bound to an asset;
- the graph's: a constant (a string constant is a "literal", kept to name it), a constant or resource the object
  graph binds, a variable's value (what is assigned to it), the output of any op not listed below, an argument an op
  other than a call passes to a function, a chain too deep to follow. A dataset function's arguments (a map's, a
  flat_map's, an interleave's...) are its input dataset's elements, followed back to the tensors a
  TensorSliceDataset or TensorDataset was made of, and the values it captures.

Through Identity-like ops, ReadVariableOp, ShardedFilename and StringJoin the path keeps the origin of its first
part (a saver's `StringJoin(file_prefix, "_temp/part")` is the caller's) if every later part is a literal and no
`..` is in them and the separator joined; through Pack, ConcatV2 and Select it is the caller's only if every part
is. Everything is memoized and bounded: one visit a node or argument, at most MAX_DEPTH deep."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...formats.tf_bundle.wire import Bad, fields, message, repeated_ints
from .tf_defaults import argument_defaults

MAX_DEPTH = 128                # levels of ops followed back (each two or three Python frames)
MAX_ORIGINS = 8                # distinct origins kept a tensor (a Pack of itself doubles nothing)
CALLS = {"PartitionedCall": 0, "StatefulPartitionedCall": 0, "If": 1, "StatelessIf": 1, "Case": 1,
         "StatelessCase": 1, "While": 0, "StatelessWhile": 0}          # op -> inputs before the callee's arguments
PASS_FIRST = ("Identity", "ReadVariableOp", "MatchingFiles", "Snapshot", "StopGradient", "Reshape", "ExpandDims",
              "Squeeze", "ShardedFilename",
              "EnsureShape", "CheckNumerics")
# dataset ops whose function gets the input dataset's elements and then `Targuments` captured values, and the
# dataset ops whose elements are their input dataset's (tensorflow/core/ops/dataset_ops.cc)
ELEMENT_FNS = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2", "FlatMapDataset",
                         "InterleaveDataset", "ParallelInterleaveDataset", "ParallelInterleaveDatasetV2",
                         "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
                         "LegacyParallelInterleaveDatasetV2", "FilterDataset", "ParallelFilterDataset",
                         "TakeWhileDataset", "MapAndBatchDataset"})
SAME_ELEMENTS = frozenset({"BatchDataset", "BatchDatasetV2", "ParallelBatchDataset", "ShuffleDataset",
                           "ShuffleDatasetV2", "ShuffleDatasetV3",
                           "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2", "RepeatDataset", "TakeDataset",
                           "SkipDataset", "ShardDataset", "PrefetchDataset", "OptionsDataset", "ModelDataset",
                           "OptimizeDataset", "OptimizeDatasetV2", "MaxIntraOpParallelismDataset",
                           "PrivateThreadPoolDataset", "FilterDataset", "ParallelFilterDataset", "UnbatchDataset",
                           "UniqueDataset", "TakeWhileDataset"})
ALL_PARTS = {"Pack": 0, "ConcatV2": -1, "Select": 1, "SelectV2": 1}   # op -> first data input (ConcatV2: all but axis)
CALLER = ("caller", "")
TABLE_INITS = ("InitializeTableFromTextFile", "InitializeTableFromTextFileV2")   # what a TF1 asset's feed reaches


@dataclass
class Node:
    op: str
    inputs: list[str]
    attrs: dict[str, bytes]


@dataclass
class Scope:
    name: str                                   # "" for the top-level graph, else the function's name
    nodes: dict[str, Node] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)


def _text(value: int | bytes, what: str) -> str:
    return message(value, what).decode("utf-8", "replace")


def _node(raw: bytes) -> tuple[str, Node]:
    """(name, Node) of a NodeDef: name 1, op 2, input 3, attr 5 (map entry: key 1, AttrValue 2)."""
    name, node = "", Node("", [], {})
    for num, _, value in fields(raw):
        if num == 1:
            name = _text(value, "node name")
        elif num == 2:
            node.op = _text(value, "node op")
        elif num == 3:
            node.inputs.append(_text(value, "node input"))
        elif num == 5:
            entry = {k: v for k, _, v in fields(message(value, "node attr"))}
            key = entry.get(1)
            if isinstance(key, bytes):
                node.attrs[key.decode("utf-8", "replace")] = message(entry.get(2, b""), "attr value")
    return name, node


def attr_strings(av: bytes) -> list[str]:
    """AttrValue.s (2), or AttrValue.list (1) -> ListValue.s (2)."""
    out = []
    for num, _, value in fields(av):
        if num == 2:
            out.append(_text(value, "attr string"))
        elif num == 1:
            out += [_text(v, "attr string") for n, _, v in fields(message(value, "attr list")) if n == 2]
    return out


def attr_functions(av: bytes) -> list[str]:
    """The functions an AttrValue names: func (10) -> NameAttrList.name (1), or list (1) -> ListValue.func (9)."""
    lists = [message(v, "attr func") for n, _, v in fields(av) if n == 10]
    for num, _, value in fields(av):
        if num == 1:
            lists += [message(v, "attr func") for n, _, v in fields(message(value, "attr list")) if n == 9]
    return [_text(v, "function name") for raw in lists for n, _, v in fields(raw) if n == 1]


def attr_types(av: bytes) -> list[int]:
    """AttrValue.list (1) -> ListValue.type (6): the dtypes of a list(type) attribute (packed or not)."""
    out: list[int] = []
    for num, _, value in fields(av):
        if num == 1:
            out += [t for n, _, v in fields(message(value, "attr list")) if n == 6 for t in repeated_ints(v, "attr type")]
    return out


def const_strings(node: Node) -> list[str] | None:
    """A Const's string values (its `value` attr: AttrValue.tensor 8 -> TensorProto.string_val 8); None if none."""
    tensors = [message(v, "const tensor") for n, _, v in fields(node.attrs.get("value", b"")) if n == 8]
    strings = [v.decode("utf-8", "replace") for t in tensors for n, _, v in fields(t) if n == 8 and isinstance(v, bytes)]
    return strings or None


def _data_inputs(node: Node) -> list[str]:
    return [i for i in node.inputs if not i.startswith("^")]


class Flow:
    """One MetaGraphDef's graphs, calls and bound objects (see the module doc)."""

    def __init__(self, meta: bytes) -> None:
        self.scopes: dict[str, Scope] = {"": Scope("")}
        self.calls: dict[str, list[tuple[Scope, Node, int]]] = {}
        self.passed: dict[str, list[tuple[Scope, Node]]] = {}   # function -> the ops that pass it arguments otherwise
        self.bound: dict[str, list[str]] = {}         # concrete function -> the kinds of the objects bound to it
        self.constants: dict[str, str] = {}           # object id -> its SavedConstant's operation
        self.defaults: dict[str, dict[int, list[str]]] = {}   # concrete function -> user argument -> string defaults
        self.any_defaults: dict[str, list[str]] = {}          # ... and those that may fill any of its arguments
        self.saver_feed = ""                          # TF1: the saver's file name tensor, fed while it saves or restores
        self.asset_feeds: set[str] = set()            # TF1: the constants the loader feeds asset paths to, for init ops
        self.assets: list[str] = []                   # AssetFileDef filenames
        main_ops: list[str] = []                      # TF1: what the loader runs after restoring (main_op, legacy)
        local_init: list[str] = []                    # ... or, with neither, Scaffold's default local init op's
        saver_ops: list[str] = []                     # the saver's save tensor and restore op
        outputs: list[str] = []                       # the signatures' outputs
        self._memo: dict[tuple[str, str], list[tuple[str, str]]] = {}
        objects: list[tuple[str, str]] = []
        concretes: list[tuple[str, list[int], bytes]] = []
        specs: list[tuple[list[str], bytes]] = []
        for num, _, value in fields(meta):
            if num == 2:
                self._graph(message(value, "graph"))
            elif num == 3:             # SaverDef: filename_tensor_name 1, save_tensor_name 2, restore_op_name 3
                saver = {n: _text(v, "saver") for n, _, v in fields(message(value, "saver")) if n in (1, 2, 3)}
                self.saver_feed = saver.get(1, "").split(":")[0]
                saver_ops += [saver.get(2, ""), saver.get(3, "")]
            elif num == 4:                       # collection_def: TF1's assets (ASSETS_KEY), main_op, legacy_init_op
                entry = {k: v for k, _, v in fields(message(value, "collection"))}
                nodes = [_text(name, "node") for n, _, listed in fields(message(entry.get(2, b""), "collection def"))
                         if n == 1 for k, _, name in fields(message(listed, "node list")) if k == 1]   # node_list 1
                if entry.get(1) in (b"saved_model_main_op", b"legacy_init_op"):
                    main_ops += nodes
                elif entry.get(1) in (b"table_initializer", b"local_init_op", b"init_op"):
                    local_init += nodes
                elif entry.get(1) in (b"local_variables", b"local_resources"):   # bytes_list 2: VariableDef /
                    local_init += [_text(v, "initializer")                          # ResourceDef, initializer 2
                                   for n, _, listed in fields(message(entry.get(2, b""), "collection def")) if n == 2
                                   for k, _, raw in fields(message(listed, "bytes list")) if k == 1
                                   for j, _, v in fields(message(raw, "variable def")) if j == 2]
                if entry.get(1) == b"saved_model_assets":          # CollectionDef.any_list 5 -> value 1 -> Any.value 2
                    lists = [message(v, "asset list") for n, _, v in fields(message(entry.get(2, b""), "collection"))
                             if n == 5]
                    anys = [message(v, "asset any") for raw in lists for n, _, v in fields(raw) if n == 1]
                    for raw in anys:
                        for n, _, asset in fields(raw):
                            if n == 2:
                                self._asset(message(asset, "asset"))
            elif num == 5:                       # signature_def: entry value 2 -> SignatureDef.outputs 2 -> TensorInfo
                signature = {k: v for k, _, v in fields(message(value, "signature"))}.get(2, b"")
                for n, _, out in fields(message(signature, "signature def")):
                    info = {k: v for k, _, v in fields(message(out, "output"))}.get(2, b"") if n == 2 else b""
                    outputs += [_text(v, "output name") for k, _, v in fields(message(info, "tensor info")) if k == 1]
            elif num == 6:
                self._asset(message(value, "asset"))
            elif num == 7:
                objects, concretes, specs = self._object_graph(message(value, "object graph"))
        # what the TF1 loaders run at the top level, and what each feeds (tf.compat.v1.saved_model.loader and
        # load_v1_in_v2): the saver (its file name), the init op (the assets; without main_op, the default local init
        # op's), the signatures (nothing); a top-level node none of them reaches never runs
        self.by_saver = self._ancestors(saver_ops)
        self.by_init = self._ancestors(main_ops or local_init)
        self.by_signature = self._ancestors(outputs)
        self.runs = self.by_saver | self.by_init | self.by_signature
        signatures = {}
        for name, bound, signature in concretes:
            self.bound[name] = [objects[i][0] if 0 <= i < len(objects) else "a missing object" for i in bound]
            signatures[name] = signature
            for k, i in enumerate(bound):
                if 0 <= i < len(objects) and objects[i][0] == "constant":
                    self.constants[f"{name}/{k}"] = objects[i][1]
        # a restored function's Python defaults, where a call omits them (each distinct spec of a function once, at
        # most MAX_ORIGINS distinct strings an argument: a file listing one function under many objects costs nothing)
        for name, spec in dict.fromkeys((name, spec) for names, spec in specs for name in names):
            if name in self.bound and name in self.scopes:
                by_arg, anywhere = argument_defaults(spec, signatures[name], len(self.scopes[name].args) - len(self.bound[name]))
                for k, strings in by_arg.items():
                    kept = self.defaults.setdefault(name, {}).setdefault(k, [])
                    kept[:] = list(dict.fromkeys(kept + strings))[:MAX_ORIGINS]
                kept = self.any_defaults.setdefault(name, [])
                kept[:] = list(dict.fromkeys(kept + anywhere))[:MAX_ORIGINS]
        self.assigned: dict[tuple[str, str], list[str]] = {}     # (scope, variable handle) -> values assigned to it
        for scope in list(self.scopes.values()):
            for node in scope.nodes.values():
                self._note_calls(scope, node)
                inputs = _data_inputs(node)
                if node.op == "AssignVariableOp" and len(inputs) > 1:
                    self.assigned.setdefault(self._variable(scope, inputs[0]), []).append(inputs[1])

    def _ancestors(self, refs: list[str]) -> set[str]:
        """The top-level nodes the tensors or ops `refs` name depend on (data and control inputs), themselves included."""
        top, seen = self.scopes[""].nodes, set()
        stack = [r.lstrip("^").split(":")[0] for r in refs]
        while stack:
            name = stack.pop()
            if name in seen or name not in top:
                continue
            seen.add(name)
            stack += [i.lstrip("^").split(":")[0] for i in top[name].inputs]
        return seen

    def _asset(self, raw: bytes) -> None:
        """AssetFileDef: tensor_info 1 (TensorInfo name 1: the constant the loader feeds), filename 2."""
        for n, _, v in fields(raw):
            if n == 1:
                self.asset_feeds.update(_text(t, "asset tensor").split(":")[0]
                                        for k, _, t in fields(message(v, "tensor info")) if k == 1)
            elif n == 2:
                self.assets.append(_text(v, "asset file name"))

    def _graph(self, raw: bytes) -> None:
        """GraphDef: node 1, library 2 (FunctionDefLibrary: function 1 -> FunctionDef signature 1, node_def 3)."""
        for num, _, value in fields(raw):
            if num == 1:
                name, node = _node(message(value, "node"))
                self.scopes[""].nodes[name] = node
            elif num == 2:
                for n2, _, fn in fields(message(value, "function library")):
                    if n2 == 1:
                        self._function(message(fn, "function"))

    def _function(self, raw: bytes) -> None:
        scope = Scope("")
        for num, _, value in fields(raw):
            if num == 1:                                    # OpDef: name 1, input_arg 2 (ArgDef name 1)
                for n, _, v in fields(message(value, "signature")):
                    if n == 1:
                        scope.name = _text(v, "function name")
                    elif n == 2:
                        scope.args += [_text(a, "argument") for k, _, a in fields(message(v, "argument")) if k == 1]
            elif num == 3:
                name, node = _node(message(value, "function node"))
                scope.nodes[name] = node
        if scope.name in self.scopes:                           # TensorFlow refuses a repeated name; keep both
            scope.name = f"{scope.name}#{len(self.scopes)}"
        self.scopes[scope.name] = scope

    @staticmethod
    def _object_graph(raw: bytes) -> tuple[list[tuple[str, str]], list[tuple[str, list[int], bytes]],
                                           list[tuple[list[str], bytes]]]:
        """(kind, constant's operation) of each SavedObject (nodes 1; kinds asset 5, variable 7, constant 9...),
        (name, bound_inputs, canonicalized_input_signature) of each concrete function (map 2: key 1,
        SavedConcreteFunction 2: bound_inputs 2, canonicalized_input_signature 3), and (concrete functions,
        FunctionSpec) of each function (SavedFunction 6: concrete_functions 1, function_spec 2) and bare concrete
        function (SavedBareConcreteFunction 8: concrete_function_name 1, function_spec 4)."""
        kinds = {4: "user object", 5: "asset", 6: "function", 7: "variable", 8: "bare concrete function",
                 9: "constant", 10: "resource", 12: "captured tensor"}
        objects, concretes, specs = [], [], []
        for num, _, value in fields(raw):
            if num == 1:
                kind, op = "an object", ""
                for n, _, v in fields(message(value, "saved object")):
                    if n in kinds:
                        kind = kinds[n]
                        if n == 9:
                            op = next((_text(o, "constant op") for k, _, o in fields(message(v, "constant")) if k == 1), "")
                        if n in (6, 8):
                            entries = list(fields(message(v, "function")))
                            names = [_text(f, "concrete function") for k, _, f in entries if k == 1]
                            specs += [(names, message(f, "function spec")) for k, _, f in entries if k == (2 if n == 6 else 4)]
                objects.append((kind, op))
            elif num == 2:
                entry = {k: v for k, _, v in fields(message(value, "concrete function"))}
                bound = [x for n, _, v in fields(message(entry.get(2, b""), "concrete function")) if n == 2
                         for x in repeated_ints(v, "bound input")]
                signature = {n: v for n, _, v in fields(message(entry.get(2, b""), "concrete function"))}.get(3, b"")
                concretes.append((_text(entry.get(1, b""), "function name"), bound, message(signature, "signature")))
        return objects, concretes, specs

    def _note_calls(self, scope: Scope, node: Node) -> None:
        if node.op in self.scopes and node.op:                # a function called by its name as an op
            self.calls.setdefault(node.op, []).append((scope, node, 0))
        for av in node.attrs.values():
            try:
                callees = attr_functions(av)
            except Bad:
                continue
            for callee in callees:
                if node.op in CALLS:
                    self.calls.setdefault(callee, []).append((scope, node, CALLS[node.op]))
                else:
                    self.passed.setdefault(callee, []).append((scope, node))

    def _variable(self, scope: Scope, ref: str) -> tuple[str, str]:
        """The variable a resource handle names: through Identity to its VarHandleOp, which its `shared_name` names
        (two VarHandleOps of one shared_name are one variable), else the tensor's own name."""
        name = ref.lstrip("^").split(":")[0]
        for _ in range(MAX_DEPTH):
            node = scope.nodes.get(name)
            if node is None or node.op != "Identity" or not _data_inputs(node):
                break
            name = _data_inputs(node)[0].split(":")[0]
        node = scope.nodes.get(name)
        shared = attr_strings(node.attrs.get("shared_name", b"")) if node is not None and node.op == "VarHandleOp" else []
        return scope.name, (f"shared:{shared[0]}" if shared and shared[0] else name)

    def origins(self, scope: Scope, ref: str, depth: int = 0) -> list[tuple[str, str]]:
        """("caller", ""), ("literal", the string), ("fed", a TF1 tensor the loader feeds at one step: `chosen` decides)
        or ("graph", what) for each source of the tensor `ref` names, at most MAX_ORIGINS distinct."""
        name = ref.lstrip("^").split(":")[0]
        key = (scope.name, name)
        if key in self._memo:
            return self._memo[key]
        if depth > MAX_DEPTH:
            return [("graph", "a chain of ops too deep to follow")]
        self._memo[key] = [("graph", "a loop of ops")]                        # until known: a cycle is the graph's
        self._memo[key] = out = list(dict.fromkeys(self._origins(scope, name, depth + 1)))[:MAX_ORIGINS]
        return out

    def _origins(self, scope: Scope, name: str, depth: int) -> list[tuple[str, str]]:
        node = scope.nodes.get(name)
        if node is None:
            if name in scope.args:
                return self._argument(scope, scope.args.index(name), depth)
            return [("graph", f"the unknown input {name[:80]!r}")]
        inputs = _data_inputs(node)
        top = not scope.name
        if top and node.op == "Placeholder":
            return [CALLER]
        if top and (name == self.saver_feed or name in self.asset_feeds):   # the caller's only where it is fed
            return [("fed", name)]
        if node.op == "Const":
            strings = const_strings(node)
            return [("literal", s) for s in strings] if strings else [("graph", "a constant")]
        if node.op in PASS_FIRST or node.op == "PlaceholderWithDefault" or node.op == "StringJoin":
            if not inputs:
                return [("graph", f"a {node.op} of nothing")]
            first = self.origins(scope, inputs[0], depth)
            if node.op != "StringJoin":
                return first
            rest = [o for i in inputs[1:] for o in self.origins(scope, i, depth)]
            separator = "".join(attr_strings(node.attrs.get("separator", b"")))
            joined = separator + "".join(w for _, w in rest)
            if all(kind in ("caller", "fed") for kind, _ in first) and all(kind == "literal" for kind, _ in rest) \
                    and ".." not in joined:
                return first
            out = [o for o in first + rest if o != CALLER] + ([("literal", separator)] if separator else [])
            return out or [("graph", "a path joined onto the caller's")]
        if node.op == "VarHandleOp":
            values = self.assigned.get(self._variable(scope, name), [])
            return [o for v in values for o in self.origins(scope, v, depth)] or [("graph", "a variable's value")]
        if node.op in ALL_PARTS:
            parts = inputs[:-1] if ALL_PARTS[node.op] < 0 else inputs[ALL_PARTS[node.op]:]
            return [o for i in parts for o in self.origins(scope, i, depth)] or [("graph", f"an empty {node.op}")]
        return [("graph", f"the output of {node.op[:80]}")]

    def _argument(self, scope: Scope, k: int, depth: int) -> list[tuple[str, str]]:
        """Where argument k of the function `scope` comes from: every call site, the op that passes it, the loader."""
        out: list[tuple[str, str]] = []
        for caller, node, offset in self.calls.get(scope.name, []):
            inputs = _data_inputs(node)
            if k + offset < len(inputs):
                out += self.origins(caller, inputs[k + offset], depth)
            else:
                out.append(("graph", f"a missing argument of {node.op[:80]}"))
            if node.op in ("While", "StatelessWhile"):       # the body's outputs come round as its arguments
                out.append(("graph", "a value a while loop carries"))
        for caller, node in self.passed.get(scope.name, []):
            inputs = _data_inputs(node)
            if node.op in ELEMENT_FNS and inputs:                # the elements, then the captured values
                captured = len(attr_types(node.attrs.get("Targuments", b"")))
                out += self._elements(caller, inputs[0], depth)
                out += [o for i in inputs[1:1 + captured] for o in self.origins(caller, i, depth)]
            else:
                out.append(("graph", f"an argument {node.op[:80]} passes"))
        bound = self.bound.get(scope.name)
        if bound is not None:
            first_bound = len(scope.args) - len(bound)
            if k < first_bound:                                       # the user's argument, or its default
                defaults = self.defaults.get(scope.name, {}).get(k, []) + self.any_defaults.get(scope.name, [])
                out += [CALLER] + [("literal", s) for s in defaults]
            else:
                kind = bound[k - first_bound]
                op = self.constants.get(f"{scope.name}/{k - first_bound}")
                const = self.scopes[""].nodes.get(op) if op is not None else None
                if kind == "asset":
                    out.append(CALLER)                                # its file: judged by `outside_assets`
                elif const is not None and (strings := const_strings(const)):   # its `value`, whatever its op
                    out += [("literal", v) for v in strings]
                else:
                    out.append(("graph", f"a bound {kind}"))
        return out or [("graph", "an argument of a function nothing calls")]

    def chosen(self, scope: Scope, name: str, node: Node, positions: tuple[int, ...]) -> list[tuple[str, str]]:
        """The origins of a path op's path inputs that are not the caller's: a TF1 feed is the caller's only for a
        top-level op only the saver runs (its file name) or only the init op runs (a table initializer reading an
        asset); elsewhere (a function, a signature, the other) the loader does not feed it, and its saved value is the
        path."""
        inputs = _data_inputs(node)
        out = []
        for kind, what in (o for k in positions if k < len(inputs) for o in self.origins(scope, inputs[k])):
            if kind == "fed":
                top = not scope.name
                saver = top and what == self.saver_feed and name in self.by_saver and \
                    name not in self.by_init | self.by_signature
                table = top and what in self.asset_feeds and node.op in TABLE_INITS and name in self.by_init and \
                    name not in self.by_saver | self.by_signature
                if saver or table:
                    continue
                fed, unfed = self.scopes[""].nodes.get(what), ("graph", f"the tensor {what[:80]!r} unfed")
                if fed is not None and fed.op == "PlaceholderWithDefault" and _data_inputs(fed):
                    out += [o for o in self.origins(self.scopes[""], _data_inputs(fed)[0]) if o[0] != "fed"] or [unfed]
                else:
                    out += [("literal", v) for v in (const_strings(fed) if fed is not None else None) or ()] or [unfed]
            elif kind != "caller":
                out.append((kind, what))
        return out

    def _elements(self, scope: Scope, ref: str, depth: int) -> list[tuple[str, str]]:
        """The origins of a dataset's elements: a TensorSliceDataset's or TensorDataset's tensors, through the ops that
        keep their input's elements (SAME_ELEMENTS); any other dataset's are the graph's."""
        for _ in range(MAX_DEPTH):
            node = scope.nodes.get(ref.lstrip("^").split(":")[0])
            inputs = _data_inputs(node) if node is not None else []
            if node is None or not inputs:
                break
            if node.op in ("TensorSliceDataset", "TensorDataset"):
                return [o for i in inputs for o in self.origins(scope, i, depth)]
            if node.op not in SAME_ELEMENTS:
                return [("graph", f"the elements of {node.op[:80]}")]
            ref = inputs[0]
        return [("graph", "the elements of a dataset not followed")]

    def outside_assets(self) -> list[str]:
        """AssetFileDef filenames the loader's os.path.join(export_dir, 'assets', name) takes outside the folder."""
        return [a for a in self.assets if a.startswith(("/", "\\")) or ".." in a.replace("\\", "/").split("/")
                or (len(a) > 1 and a[1] == ":")]
