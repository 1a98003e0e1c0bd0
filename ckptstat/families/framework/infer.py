"""What families read when there is no config.json: tensor names under their transformers (PyTorch)
spelling whatever the file's format, shape look-ups by name pattern, and GGUF metadata keys mapped onto
config.json keys. Pure functions over names, shapes and metadata."""
from __future__ import annotations

import re
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import replace
from typing import Any

from ...core import TensorInfo
from ...core.tensor_table import TensorTable, with_extra
from ...errors import UsageError
from ...naming import joined_slices, normalize, role_of
from ...naming.layout_ties import kernel_layout, out_in_shape
from .base import Tensors

# TF spellings -> transformers' PyTorch spelling, applied after naming.normalize (which has turned
# `/` into `.`, dropped `:0` and `/.ATTRIBUTES/VARIABLE_VALUE`, and made HF TF's `layer_._3` `layer.3`).
_TF_SPELLINGS = [
    (re.compile(r"^tf[a-z0-9_]*\."), ""),                           # HF TF main layer: tf_bert_model/, tf_bert_for_pre_training/
    (re.compile(r"(^|\.)layer_(\d+)(?=\.)"), r"\1layer.\2"),         # google-research BERT: bert/encoder/layer_3/
    (re.compile(r"(^|\.)_?kernel$"), r"\1weight"),                   # Keras Dense kernel (Keras 3: _kernel)
    (re.compile(r"(^|\.)gamma$"), r"\1weight"),                      # Keras / google-research LayerNorm scale
    (re.compile(r"(^|\.)beta$"), r"\1bias"),                         # ... and offset
    (re.compile(r"\.embeddings$"), ".weight"),                       # Keras Embedding; HF TF position/token_type_embeddings
    (_TF1_TABLE := re.compile(r"_embeddings$"), "_embeddings.weight"),   # google-research BERT: bert/embeddings/word_embeddings
    (re.compile(r"(^|\.)output_weights$"), r"\1weight"),             # google-research cls/seq_relationship/output_weights
    (re.compile(r"(^|\.)output_bias$"), r"\1bias"),                  # google-research cls/predictions/output_bias
    # Flax linen (transformers' PyTorch <-> Flax converter, modeling_flax_pytorch_utils.rename_key_and_reshape_tensor):
    # nn.Embed's `embedding`, a norm's `scale` (only under a norm: HQQ stores a `q_proj.scale` of its own); a
    # `kernel` is the Keras rule above, its shape turned by the reader's extra["layout"] (formats/flax_msgpack.py)
    (re.compile(r"(^|\.)embedding$"), r"\1weight"),
    (re.compile(r"(?i)((?:^|\.)[^.]*(?:norm|ln)[^.]*)\.scale$"), r"\1.weight"),
]


# A literal every match of a _TF_SPELLINGS rule contains (tests/test_quick_path.py checks each rule has
# one): a name with none of them (every PyTorch name) skips the rewrites. Literals, not the rules
# themselves: Python's re tries each alternative at every position, 10x slower (docs/performance.md).
_TF_LITERALS = ("tf", "layer_", "kernel", "gamma", "beta", "embeddings", "output_weights", "output_bias", "embedding", "scale")
_ANY_TF_LITERAL = re.compile("|".join(_TF_LITERALS))


_REPEATED_SCOPE = re.compile(r"^([^/]+)/\1/")


def canonical_name(name: str) -> str:
    """The transformers (PyTorch) spelling of a tensor name: google-research TF1 BERT, HF TF (`:0`,
    `tf_bert_model/...`, `mlm___cls`) and Keras names map onto `bert.encoder.layer.0...weight`."""
    # HF TF shared embeddings (TFT5's `shared`, TFBart's `model.shared`) are layers built outside the model's
    # scope, their weight named `<layer>/<layer>/embeddings:0`; transformers drops level zero
    # (modeling_tf_pytorch_utils.convert_tf_weight_name_to_pt_weight_name): `shared.weight`, `model.shared.weight`
    n = normalize(_REPEATED_SCOPE.sub(r"\1/", name) if "/" in name else name)   # (the rule needs a `/`)
    if "___" not in n and not _ANY_TF_LITERAL.search(n):
        return n
    if "___" in n:   # HF TF scopes `$1___$2` read `$2` (modeling_tf_pytorch_utils): mlm___cls/ -> cls.
        parts = n.split(".")
        n = ".".join([p.rsplit("___", 1)[-1] for p in parts[:-1]] + parts[-1:])
    for rx, repl in _TF_SPELLINGS:
        if rx is _TF1_TABLE and "/" not in name:
            continue   # a TF1 variable path only: in a `.`-joined (Flax) name a bare `*_embeddings` is a parameter (ViT's)
        n = rx.sub(repl, n)
    return n


class NameIndex(Mapping[str, TensorInfo]):
    """canonical_tensors' result, read-only: the tensors under their canonical names (the reader's own mapping where
    no name changes, not a copy of it), whose names `find` searches joined by newlines a slice at a time, its pattern
    once over each slice's text (in C) instead of once per name (docs/performance.md)."""

    __slots__ = ("_tensors",)

    def __init__(self, tensors: Mapping[str, TensorInfo]):
        self._tensors = tensors

    def __getitem__(self, name: str) -> TensorInfo:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def items(self) -> ItemsView[str, TensorInfo]:
        return self._tensors.items()

    def values(self) -> ValuesView[TensorInfo]:
        return self._tensors.values()

    def texts(self) -> Iterator[str | None]:
        """The names joined by newlines a slice at a time (naming.joined_slices: one slice's text alive, not all
        names' (28 MB at 1M tensors)); None for a slice where a name holds a newline (or a lone empty name)."""
        names = self._tensors.names if isinstance(self._tensors, TensorTable) else list(self._tensors)
        for _, _, text in joined_slices(names):
            yield text or None


def tf_spelled(tensors: Tensors, forms: str | None = None) -> bool:
    """Names spelled as TF writes them, which canonical_name is for: the reader marked Dense kernels stored
    [in, out] (TF1 and TF2 checkpoints, Keras and HF TF .h5: formats/keras_names.py), or TF2 variable names
    (`...:0`, as Keras 2 .h5 files list them; HF TF GPT-2 has Conv1D weights, no kernel). A PyTorch file's
    names are its model's own (ViT's bare `position_embeddings` is not an Embedding layer's table).
    forms: the names' naming.digit_forms, if known (no `:0` there, none in the names)."""
    if (forms is None or ":0\n" in forms + "\n") and ":0\n" in "\n".join(tensors) + "\n":
        return True
    return any(t.extra.get("layout") == "in_out" for t in with_extra(tensors))


# What any rewrite of canonical_name or kernel_layout needs in a name: normalize's characters and rules
# (`/`, `:`, `_._`, ATTRIBUTES), HF TF scopes (`___`), a _TF_SPELLINGS literal (kernel_layout's literals,
# `kernel` and `output_weights`, are among them). A name holding none is its own canonical name.
_REWRITE_LITERALS = ("/", ":", "_._", "ATTRIBUTES", "___") + _TF_LITERALS


# A literal in every name naming.ROLE_RULES gives the roles canonical_tensors leaves out (optimizer, counter;
# tests/test_quick_path.py checks each rule's alternatives): names holding none need no role look-up.
_LEFT_OUT_LITERALS = ("optim", "opt_state", "exp_avg", "momentum_buffer", "adam_", "OPTIMIZER_SLOT", "step", "save_counter",
                      "epoch", "iteration", "num_updates", "OBJECT_GRAPH",
                      # PaddlePaddle's accumulators and scheduler (naming.PADDLE_ACCUMULATOR)
                      "_moment", "_pow_acc", "_velocity", "_mean_square", "_mean_grad", "LR_Scheduler", "master_weights")


def _may_rewrite(text: str, forms: str | None = None) -> set[str]:
    """The names canonical_name may change, found by one search over all names joined by newlines
    (`text`, one name a line: in C, not a call a name: docs/performance.md). forms: their digit_forms,
    where the literals (none holds a digit) are looked for first."""
    out: set[str] = set()
    present = [lit for lit in _REWRITE_LITERALS if lit in (text if forms is None else forms)]   # a fast scan; a regex is not
    if not present:
        return out
    end = -1
    for m in re.finditer("|".join(map(re.escape, present)), text):
        if m.start() < end:   # a second hit in the name already taken
            continue
        begin = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else end
        out.add(text[begin:end])
    return out


def canonical_tensors(tensors: Tensors, metadata: Mapping[str, str] | None = None,
                      forms: str | None = None) -> NameIndex:
    """Parameters under their PyTorch names, with 2-D weights in [out, in] shape (TF Dense kernels are
    stored [in, out]: naming.kernel_layout). A name that safetensors.torch.save_model dropped in favour
    of another (`__metadata__[dropped] = kept`) is resolved to the kept tensor. Optimizer slots
    (TF1 `.../adam_m`, which share their variable's shape) and counters are left out. forms: the names'
    naming.digit_forms, if known (the literal pre-checks scan it instead of all names)."""
    text = ""
    rewrite: set[str] | None = set()
    if forms is None or any(lit in forms for lit in _REWRITE_LITERALS):   # (forms: no name holds a newline)
        names = list(tensors)
        text = "\n".join(names)   # (36 MB at 1M names: only when some name may change)
        rewrite = _may_rewrite(text, forms) if text.count("\n") == len(names) - 1 else None   # None: any may change
    # every name its own canonical name and every shape its own: the tensors themselves, wrapped (no copy)
    same = (rewrite == set() and not any(lit in (text if forms is None else forms) for lit in _LEFT_OUT_LITERALS)
            and not any(t.extra.get("layout") for t in with_extra(tensors)))
    out: dict[str, TensorInfo] = {}
    for name, t in tensors.items() if not same else ():
        if role_of(name, t.dtype, t.shape) in ("optimizer", "counter"):
            continue
        layout = t.extra.get("layout")
        if rewrite is None or name in rewrite:
            layout = layout or kernel_layout(name, t.shape)
            name = canonical_name(name)
        shape = out_in_shape(t.shape, layout if isinstance(layout, str) else None)
        out.setdefault(name, t if shape == t.shape else replace(t, shape=shape))
    dropped = [(canonical_name(d), canonical_name(k)) for d, k in (metadata or {}).items() if d not in tensors and k in tensors]
    if same and not dropped:
        return NameIndex(tensors)
    if same:
        out = dict(tensors.items())
    for dropped_name, kept in dropped:
        if kept in out:
            out.setdefault(dropped_name, out[kept])
    return NameIndex(out)


_LEADING_ANCHOR = re.compile(r"^(\^|\((\?:)?\^\|\\\.\))")   # `^`, `(^|\.)`, `(?:^|\.)`
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")   # group numbers would shift: such a pattern is searched whole


def _joined_pattern(pattern: str) -> str:
    r"""`pattern` without its leading `^` / `(^|\.)` (find's search over the joined names), or whole when
    that would shift group numbers (a backreference) or when a quantifier follows the anchor (`(^|\.)?x`,
    `(^|\.){2}x`: what remains would not match wherever the pattern does)."""
    bare = _LEADING_ANCHOR.sub("", pattern, count=1)
    if _BACKREF.search(pattern) or bare[:1] in ("?", "*", "+", "{"):
        return pattern
    try:
        re.compile(bare)
    except re.error:
        return pattern
    return bare


_LOOKS_PAST_NAME = re.compile(r"\(\?<?[=!]|\\[AZ]|\\n")


def find(tensors: Tensors, pattern: str) -> TensorInfo | None:
    """The first tensor whose (canonical) name matches `pattern`, or None."""
    rx = re.compile(pattern)
    if isinstance(tensors, NameIndex) and not _LOOKS_PAST_NAME.search(pattern):
        # One search over each slice of the names joined by newlines (re.M: ^ and $ at each name's ends). The
        # leftmost match lies in the first name that matches, unless the pattern reached across a newline: each hit
        # is checked on its own name, and the scan goes on from the next name after a false one. A pattern that
        # could fail in the joined text where it matches the name alone (lookarounds, \A, \Z) scans name by name.
        # Searched without a leading `^` or `(^|\.)`: the rest starts with a literal, which re finds by a fast scan,
        # not by trying the group at every position; it matches wherever the pattern does.
        rx_m = re.compile(_joined_pattern(pattern), re.M)
        for text in tensors.texts():
            if text is None:   # a name holding a newline: name by name
                break
            at = 0
            while (m := rx_m.search(text, at)) is not None:
                begin = text.rfind("\n", 0, m.start()) + 1   # the name the hit starts in
                end = text.find("\n", begin)
                name = text[begin:] if end < 0 else text[begin:end]
                if rx.search(name):
                    return tensors[name]
                if end < 0:
                    break
                at = end + 1
        else:
            return None
    for name, t in tensors.items():
        if rx.search(name):
            return t
    return None


def has(tensors: Tensors, pattern: str) -> bool:
    return find(tensors, pattern) is not None


def shape(tensors: Tensors, pattern: str, what: str) -> tuple[int, ...]:
    """The shape of the tensor matching `pattern`; UsageError naming `what` when there is none."""
    t = find(tensors, pattern)
    if t is None:
        raise UsageError(f"cannot infer the architecture from tensor names: no tensor for {what}; pass --config")
    return t.shape


# transformers 5 holds a MoE layer's routed experts fused (integrations/moe.py: gate_up_proj [E, 2f, h], down_proj
# [E, h, f]); save_pretrained writes them back one tensor per expert, a torch.save of its state_dict keeps them fused.
FUSED_EXPERTS = r"(^|\.)layers\.\d+\.mlp\.experts\.(gate_up_proj|down_proj)$"


def expert_width(tensors: Tensors, per_expert: str, what: str, mlp: str = "mlp") -> int:
    """The routed experts' intermediate width: the rows of the first expert's `per_expert` weight (the layout
    save_pretrained writes), or the last axis of transformers 5's fused `{mlp}.experts.down_proj` [E, h, f] (a
    torch.save of the model's state_dict; `mlp` the MoE block's name, Jamba's feed_forward, as LFM2-MoE's)."""
    t = find(tensors, per_expert)
    if t is None and (fused := find(tensors, rf"(^|\.)layers\.\d+\.({re.escape(mlp)}|feed_forward)\.experts\.down_proj$")) \
            is not None \
            and len(fused.shape) == 3:
        return fused.shape[2]
    return shape(tensors, per_expert, what)[0]


def count_layers(names: Iterable[str], pattern: str) -> int:
    """1 + the largest layer index `pattern`'s group 1 captures, or 0."""
    rx = re.compile(pattern)
    idx = {int(m.group(1)) for n in names if (m := rx.search(n))}
    return max(idx) + 1 if idx else 0


def heads_for(width: int, preferred: int) -> tuple[int, str]:
    """Heads of an attention `width` wide when the weights do not say (head_dim `preferred` if it divides)."""
    d = preferred if width % preferred == 0 else width
    return width // d, f"no config: head_dim assumed {d} (head count only affects attention-score memory)"


def num_labels(tensors: Tensors, head: str = r"(^|\.)(classifier(\.out_proj)?|qa_outputs)\.weight$") -> int:
    """Classes of a classification head: rows of its last projection's weight matching `head` ([out, in] after
    canonical_tensors; by default an encoder's classifier, or a span (QA) head's qa_outputs, num_labels wide); 2
    without one."""
    t = find(tensors, head)
    return t.shape[0] if t is not None and len(t.shape) == 2 else 2


# GGUF metadata keys (docs/formats.md section 6; llama.cpp LLM_KV_*) -> config.json keys, for the families whose
# GGUF layout is the transformers model's.
GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
             "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
             "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
             "context_length": "max_position_embeddings", "expert_count": "num_local_experts",
             "expert_used_count": "num_experts_per_tok"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors, architecture: str,
                keys: Mapping[str, str] = GGUF_KEYS) -> dict[str, Any] | None:
    """config.json keys from `{arch}.*` GGUF metadata (`keys`: GGUF_KEYS, or a family's own map), with
    `architectures` [architecture], the vocabulary from token_embd.weight and tie_word_embeddings from whether
    output.weight is stored (llama.cpp reuses token_embd when it is not). None when the file has no
    token_embd.weight. A value that is not an integer is left out (from_config then names the missing key)."""
    if "token_embd.weight" not in tensors:
        return None
    cfg: dict[str, Any] = {k: v for g, k in keys.items() if (v := gguf_int(metadata, f"{arch}.{g}")) is not None}
    cfg.update(model_type=arch, architectures=[architecture], vocab_size=tensors["token_embd.weight"].shape[0],
               tie_word_embeddings="output.weight" not in tensors)
    return cfg


def gguf_rotary(arch: str, metadata: Mapping[str, str], cfg: dict[str, Any], key: str) -> None:
    """Set cfg[key] (partial_rotary_factor, GPT-NeoX's rotary_pct) to the rotated dims per head the converter
    writes as `rope.dimension_count`, over the head's width; left out when either is unknown."""
    rope = gguf_int(metadata, f"{arch}.rope.dimension_count")
    h, a = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if rope and h and a and h % a == 0:
        cfg[key] = rope / (h // a)


def gguf_int(metadata: Mapping[str, str], key: str) -> int | None:
    """A GGUF integer key (Checkpoint.metadata holds text, formats/gguf.py); None if absent or not an integer."""
    v = metadata.get(key)
    return int(v) if v is not None and re.fullmatch(r"-?\d{1,19}", v) else None


def gguf_float(metadata: Mapping[str, str], key: str) -> float | None:
    """A GGUF f32 key as a float; None if absent or not a finite number."""
    try:
        v = float(metadata[key])
    except (KeyError, ValueError):
        return None
    return v if v == v and abs(v) != float("inf") else None
