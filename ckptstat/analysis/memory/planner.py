"""The memory planner (issue #17): bytes per device, line by line, for a workload (inference or
training) under a parallel layout (--gpus/--tp/--pp, ZeRO, CPU offload). Every line carries its rule;
docs/memory_planner.md gives the sources. analysis/memory/ adds the verdict and the searches.

Where the parameters sit comes from the family's op template (families/framework/graph.py), one module at a time:
 - tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the linear layers of every block are split
   column- or row-wise (weights and column-parallel biases sharded; a row-parallel layer's bias is added
   after the all-reduce, so it is replicated), but those vLLM replicates (REPLICATED_LINEAR: routers, MLA's
   down-projections); the word embedding and the LM head are vocab-parallel;
   a mixer's 1-D convolution is split over its channels; norms, position/type embeddings, pooler, classifiers and
   anything else are replicated;
 - pipeline parallelism: blocks split evenly over the stages (ceil(L/pp) on the fullest one), the
   embeddings on the first stage, the head on the last (a tied head: the last stage keeps its own copy
   of the word embedding, as Megatron does);
 - ZeRO (Rajbhandari et al. 2020) over the data-parallel degree dp = gpus / (tp x pp): stage 1 shards
   the optimizer state and fp32 master weights, 2 the gradients too, 3 the weights too.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from ...census.model import Model
from ...errors import UsageError
from ...families import get
from ...families.fp32_table import FP32_KEPT_RULE, op_param, unconverted
from ...families.fp32_table import pattern as fp32_pattern
from ...families.framework.base import VOCAB_LOGITS, ArchSpec
from ...families.framework.graph import build
from . import autocast as amp
from .peaks import eager_scores, module_peak, ssm_layer
from .quant import QUANTISED, ROUTER, Quant, config_quant
from .saved import eager_only, korthikanti, text_saved
from .tp_states import rank_states

FLOAT_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
KV_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
OPTIMIZERS = ("adam", "adamw-8bit", "sgd", "sgd-momentum", "adafactor")
MODES = ("inference", "training")
ATTENTION = ("eager", "flash")
RESERVE_RULE = "CUDA context, allocator slack"
DEFAULT_RESERVE = 1 << 30
# bitsandbytes' 8-bit optimizers (bitsandbytes/optim/optimizer.py, Optimizer2State.init_state): uint8 states with
# one fp32 absmax per 256-value block; a tensor under min_8bit_size (4096) elements keeps fp32 states
BNB_OPTIM_BLOCK = 256
BNB_MIN_8BIT = 4096
# a row-parallel linear (the attention output and the MLP's second projection): its bias is replicated
ROW_PARALLEL = re.compile(r"(^|\.)(o_proj|out_proj|down_proj|c_proj|fc2|dense_4h_to_h|wo|w2|dense)$")
# a layer group's label in the op templates (layers[32], layers[1 dense], layers[3 sliding]): its modules are
# layers, placed and split like any other, even when the group is one layer that runs once (Kimi-K2's dense layer 0)
LAYER_GROUP = re.compile(r"\[\d+( [a-z][a-z ,]*)?\]")
COLUMN_DENSE = re.compile(r"intermediate\.dense$")   # BERT's first MLP projection, despite its name
# linears of the blocks vLLM keeps whole on every tp rank (ReplicatedLinear or a plain nn.Linear in its model code):
# a MoE router (deepseek_v2.py, mixtral.py, gpt_oss.py `gate`/`router`) and Qwen2-MoE's shared_expert_gate, and MLA's
# down-projections q_a_proj / kv_a_proj_with_mqa (deepseek_v2.py DeepseekV2MLAAttention), whose outputs every head needs
# DeepSeek-V4's (deepseek_v4.py, deepseek_v4_attention.py, deepseek_compressor.py): its fused wq_a + wkv, the compressors'
# fused wkv + wgate (disable_tp) and the indexer's wq_b and weights_proj, the one K = V head and the q LoRA every head
# reads; its hyper-connections' fn are plain parameters
REPLICATED_LINEAR = {"MoE routers": ROUTER, "shared-expert gates": re.compile(r"(^|\.)shared_expert_gate(\.|$)"),
                     "MLA down-projections": re.compile(r"(^|\.)(q_a_proj|kv_a_proj_with_mqa)(\.|$)"),
                     "DeepSeek-V4 single-head projections": re.compile(
                         r"\.(wq_a|wkv|wgate|indexer\.wq_b|indexer\.weights_proj|hc_(attn|ffn)_fn)( |$)")}


@dataclass(frozen=True)
class Plan:
    """The planner's settings; `None` means the default named in docs/memory_planner.md."""
    mode: str = "inference"
    weights_dtype: str | None = None      # None: as stored
    kv_dtype: str | None = None           # None: the activation dtype
    optimizer: str = "adam"
    master_weights: bool | None = None    # None: on when the weights are 16-bit (training)
    zero: int = 0
    checkpointing: bool = False
    gpus: int | None = None               # None: tp x pp
    tp: int = 1
    pp: int = 1
    cpu_offload: bool = False
    autocast: str | None = None           # torch.autocast to bf16/fp16 of float32 weights (autocast.py)
    attention: str = "eager"              # eager materialises the b x a x s x s scores; flash (and SDPA's fused kernels) does not
    capacity: int | None = None
    device: dict | None = None            # {"name", "gb", "source"} or {"gpu_mem": text}
    reserve: int = DEFAULT_RESERVE
    reserve_source: str = "default 1 GiB"

    @property
    def dp(self) -> int:
        return (self.gpus or self.tp * self.pp) // (self.tp * self.pp)

    def check(self, s: ArchSpec | None) -> None:
        """UsageError for settings that make no sense (for this architecture, when s is given)."""
        def bad(msg: str) -> UsageError:
            return UsageError(msg)
        if self.mode not in MODES:
            raise bad(f"--mode must be inference or training, got {self.mode!r}")
        if self.weights_dtype is not None and self.weights_dtype not in FLOAT_BYTES and self.weights_dtype not in QUANTISED:
            raise bad(f"--weights-dtype must be one of {', '.join([*FLOAT_BYTES, *QUANTISED])}, got {self.weights_dtype!r}")
        if self.kv_dtype is not None and self.kv_dtype not in KV_BYTES:
            raise bad(f"--kv-dtype must be one of {', '.join(KV_BYTES)}, got {self.kv_dtype!r}")
        if self.attention not in ATTENTION:
            raise bad(f"--attention must be eager or flash, got {self.attention!r}")
        if self.optimizer not in OPTIMIZERS:
            raise bad(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.zero not in (0, 1, 2, 3):
            raise bad(f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        for flag, v in (("--tp", self.tp), ("--pp", self.pp), ("--gpus", self.gpus)):
            if v is not None and not 1 <= v <= 1 << 24:
                raise bad(f"{flag} must be a positive integer up to {1 << 24:,}, got {str(v)[:40]}")
        gpus = self.gpus or self.tp * self.pp
        if gpus % (self.tp * self.pp):
            raise bad(f"--gpus {gpus} is not a multiple of --tp {self.tp} x --pp {self.pp}")
        if self.mode == "inference" and (self.zero or self.checkpointing):
            raise bad("--zero and --checkpointing apply to --mode training")
        if self.mode == "training" and self.weights_dtype in QUANTISED:
            raise bad(f"--mode training with --weights-dtype {self.weights_dtype}: training quantised weights means "
                      "adapters (QLoRA), which the planner does not model; train in bf16/fp16/fp32")
        amp.check(self.autocast, self.mode, self.weights_dtype, self.zero, s)
        if s is None:
            return
        if self.weights_dtype == "mxfp4" and not s.experts:
            raise bad("--weights-dtype mxfp4 quantises routed experts (transformers' Mxfp4GptOssExperts); this model has none")
        if self.tp > 1 and s.heads % self.tp:
            raise bad(f"--tp {self.tp} does not divide the {s.heads} attention heads (Megatron and vLLM require it)")
        if self.tp > 1 and s.kv_heads > self.tp and s.kv_heads % self.tp:
            raise bad(f"--tp {self.tp} does not divide the {s.kv_heads} key/value heads")
        if self.tp > 1:
            rank_states(s, self.tp)   # a hybrid mixer's states vLLM cannot split over tp: its UsageError
        if self.pp > 1 and self.pp > layers_stored(s):   # (a model of 0 layers, which transformers builds: --pp 1 fits)
            raise bad(f"--pp {self.pp} exceeds the model's {layers_stored(s)} layers")

    def settings(self) -> dict:
        d = asdict(self)
        d["dp"] = self.dp
        d["gpus"] = self.gpus or self.tp * self.pp
        return d


def layers_stored(s: ArchSpec) -> int:
    return s.layers + s.decoder_layers


@dataclass
class Split:
    """Parameters by placement: (where, sharded) -> count, bytes at the planned dtype, and Adafactor's
    second-moment elements; where is first (embeddings), layers (the blocks) or last (head, pooler)."""
    params: dict[tuple[str, bool], float] = field(default_factory=dict)
    bytes: dict[tuple[str, bool], float] = field(default_factory=dict)
    factored: dict[tuple[str, bool], float] = field(default_factory=dict)
    small: dict[tuple[str, bool], float] = field(default_factory=dict)   # params in tensors under BNB_MIN_8BIT
    replicated: dict[str, float] = field(default_factory=dict)    # what is replicated under TP, by kind: params
    tied_embedding: tuple[float, float, float] | None = None      # (params, bytes, factored) of a tied head's table
    matmul: dict[tuple[str, bool], float] = field(default_factory=dict)   # weights and biases a matmul reads
    dtype_rule: str = ""

    def add(self, where: str, sharded: bool, params: float, nbytes: float, factored: float, small: float = 0) -> None:
        k = (where, sharded)
        self.small[k] = self.small.get(k, 0) + small
        self.params[k] = self.params.get(k, 0) + params
        self.bytes[k] = self.bytes.get(k, 0) + nbytes
        self.factored[k] = self.factored.get(k, 0) + factored


def quantised(m: Model, plan: Plan) -> tuple[Quant | None, str]:
    """The quantised layout the blocks' linears are planned in: `--weights-dtype`'s, else (inference, weights as
    stored) a bare config's quantization_config's; and a note when that config's method is not modelled."""
    q: Quant | None
    if plan.weights_dtype in QUANTISED:
        q, note = Quant(plan.weights_dtype), ""
    elif plan.weights_dtype is None and plan.mode == "inference":
        q, note = config_quant(m.quantization, m.config_path or m.path, 4 if m.bytes_per_param >= 4 else 2)
    else:
        return None, ""
    return (q and q.leaving(unconverted(m.config))), note


def weight_bytes_per_param(m: Model, plan: Plan) -> float:
    """Bytes per parameter outside quantised linears: the override, 2 (bf16) beside quantised weights, the stored
    average, or a bare config's dtype (parameters the class keeps in float32 aside: split)."""
    wd = plan.weights_dtype
    if wd in FLOAT_BYTES:
        return FLOAT_BYTES[wd]
    if wd in QUANTISED:
        return 2
    return m.bytes_per_param


def split(m: Model, plan: Plan) -> Split:
    s = m.spec
    wd = plan.weights_dtype
    wb = weight_bytes_per_param(m, plan)
    out = Split()
    q, q_note = quantised(m, plan)
    if q and wd:
        out.dtype_rule = f"{q.rule()}; embeddings, norms, biases, head bf16"
    elif q:
        out.dtype_rule = f"weights as the checkpoint stores them ({q.source}): {q.rule()}; " \
                         f"{s.dtype or 'float32, assumed'} elsewhere"
    elif wd:
        out.dtype_rule = f"{m.params:,} parameters x {wb:g} B ({wd})"
    else:
        out.dtype_rule = f"as stored ({', '.join(sorted(m.param_bytes)) or s.dtype or 'float32, assumed'}): " \
                         f"{wb:.4g} B/param on average{'; ' + q_note if q_note else ''}"
    float32_experts = amp.grouped_experts(s)   # grouped_mm's experts: autocast casts none of their weights
    # what transformers' from_pretrained keeps in float32 at a 16-bit dtype (families/fp32_table.py)
    kept = None if q or wd is None and m.param_bytes else fp32_pattern(m.config, wd or s.dtype)
    if kept and m.float32_kept:
        out.dtype_rule += f"; {FP32_KEPT_RULE}"
    for op in m.oracle.ops() if m.oracle else build(s):
        width = 4 if kept and kept.search(op_param(op.module)) else wb
        where = "first" if op.bucket == "embedding" else "last" if op.bucket in ("cls", "pooler") else "layers"
        if where == "layers" and op.calls == 1 and layers_stored(s) > 1 and not LAYER_GROUP.search(op.module):
            where = "last"   # a module of the stack that runs once outside a layer: the final norm, after the last block
        if op.kind == "linear":
            fin, fout = op.in_shape[-1], op.out_shape[-1]
            n = fin * fout
            if n == 0:   # a zero-width linear (intermediate_size 0): no weight, whatever it is
                continue
            if op.params == 0:
                if fout == s.vocab and where == "last":
                    out.tied_embedding = (n, n * width, n + fout)   # a tied LM head: the word embedding's table
                    out.matmul[(where, True)] = out.matmul.get((where, True), 0) + n
                continue
            copies: float
            if op.params % n == 0:
                copies, bias = op.params // n, 0
            elif op.params % (n + fout) == 0:
                copies = op.params // (n + fout)
                bias = copies * fout
            else:
                copies, bias = op.params / n, 0
            w = op.params - bias
            whole = next((k for k, r in REPLICATED_LINEAR.items() if r.search(op.module)), None) if where == "layers" else None
            sharded = where == "layers" and not whole or fout == s.vocab
            if where == "layers" and q and q.converts(op.module):
                wbytes = copies * q.bytes(fin, fout)
            else:
                wbytes = w * width
            out.add(where, sharded, w, wbytes, copies * (fin + fout), w if n < BNB_MIN_8BIT else 0)
            cast = not (float32_experts and amp.expert_op(op))
            out.matmul[(where, sharded)] = out.matmul.get((where, sharded), 0) + w * cast
            if bias:
                row = bool(ROW_PARALLEL.search(op.module)) and not COLUMN_DENSE.search(op.module)
                b_sharded = where == "layers" and not row and not whole
                out.add(where, b_sharded, bias, bias * width, bias, bias if fout < BNB_MIN_8BIT else 0)
                out.matmul[(where, b_sharded)] = out.matmul.get((where, b_sharded), 0) + bias * cast
                if not b_sharded:
                    _note(out, whole or ("biases of row-parallel linears" if row else "biases of head/pooler linears"), bias)
            if not sharded:
                _note(out, whole or "pooler and classifier linears", w)
        elif op.params:
            dim = op.out_shape[-1] if op.out_shape else 1
            rows = op.params // dim if op.kind == "embedding" and dim else 0
            # a 1-D convolution inside the layers (a state-space or gated DeltaNet mixer's depthwise conv1d) and Mamba1's
            # A_log [i, N]: their channels are the heads tensor parallelism splits, so they are split with them (as the
            # meta path places a convolution's weight and any 2-D parameter: meta.param_ops)
            conv = op.kind == "conv" and where == "layers" and len(op.in_shape) == 3
            sharded = op.kind == "embedding" and rows == s.vocab or conv or op.kind == "ssm_weight" and where == "layers"
            # Adafactor factors a 2-D table into rows + cols; anything else is counted unfactored
            factored = rows + dim if op.kind == "embedding" and rows else op.params
            # a norm's tensors are vectors of the width; an embedding one table; other modules: assumed large
            tensor = dim if op.kind == "norm" else op.params if op.kind == "embedding" else BNB_MIN_8BIT
            out.add(where, sharded, op.params, op.params * width, factored, op.params if tensor < BNB_MIN_8BIT else 0)
            if not sharded:
                _note(out, {"norm": "norms", "embedding": "position / type embeddings"}.get(op.kind, f"{op.kind} modules"),
                      op.params)
    pred = sum(out.params.values())
    if pred and m.params != pred:
        # the checkpoint holds another count than the template: scale every placement alike, so the stored
        # bytes still add up (a note on the report says the two disagree)
        r = m.params / pred
        for d in (out.params, out.bytes, out.factored, out.small, out.matmul):
            for k in d:
                d[k] *= r
        out.replicated = {k: v * r for k, v in out.replicated.items()}
    if wd is None and not q and m.param_bytes:   # as stored: exactly the stored bytes, spread by parameter count
        total = sum(out.params.values())
        for k in out.bytes:
            out.bytes[k] = out.params[k] / total * m.weight_bytes if total else 0
    return out


def _note(out: Split, kind: str, params: float) -> None:
    out.replicated[kind] = out.replicated.get(kind, 0) + params


@dataclass
class Stage:
    """One device's share of the parameters: sharded/tp + replicated, on the fullest stage."""
    name: str
    params: float
    bytes: float
    factored: float
    small: float                # params in tensors under bitsandbytes' min_8bit_size
    replicated_bytes: float
    block_bytes: float          # the largest block on the device (streamed under inference --cpu-offload)
    matmul: float = 0.0         # parameters matmuls read, weights and biases (autocast's casts)


def stage_share(sp: Split, s: ArchSpec, plan: Plan, stage: str) -> Stage:
    L = layers_stored(s)
    share = math.ceil(L / plan.pp) / L if L else 1
    wanted = {"all": ("first", "layers", "last"), "first": ("first", "layers"), "last": ("layers", "last")}[stage]
    tot = {"params": 0.0, "bytes": 0.0, "factored": 0.0, "small": 0.0}
    rep = 0.0
    per_where: dict[str, float] = {}

    def on_device(where: str, sharded: bool) -> float:
        """The share of a placement's parameters this device holds: its layers' under pp, / tp where sharded."""
        return (share if where == "layers" and plan.pp > 1 else 1) / (plan.tp if sharded else 1)

    for (where, sharded), p in sp.params.items():
        if where not in wanted:
            continue
        f = on_device(where, sharded)
        tot["params"] += p * f
        tot["bytes"] += sp.bytes[(where, sharded)] * f
        tot["factored"] += sp.factored[(where, sharded)] * f
        tot["small"] += sp.small.get((where, sharded), 0) * f
        per_where[where] = per_where.get(where, 0) + sp.bytes[(where, sharded)] * f
        if not sharded:
            rep += sp.bytes[(where, sharded)] * f
    if stage == "last" and plan.pp > 1 and sp.tied_embedding:
        p, b, fa = sp.tied_embedding
        tot["params"] += p / plan.tp
        tot["bytes"] += b / plan.tp
        tot["factored"] += fa / plan.tp
        per_where["last"] = per_where.get("last", 0) + b / plan.tp
    layers_here = math.ceil(L / plan.pp) if L else 1
    block = max([per_where.get("layers", 0) / max(layers_here, 1), per_where.get("first", 0), per_where.get("last", 0)])
    mm = sum(p * on_device(where, sharded) for (where, sharded), p in sp.matmul.items() if where in wanted)
    return Stage(stage, tot["params"], tot["bytes"], tot["factored"], tot["small"], rep, block, mm)


Line = dict   # {"group", "item", "bytes", "rule"}


def _line(group: str, item: str, nbytes: float, rule: str) -> Line:
    """A line of the plan, its bytes rounded up to whole bytes, not up from a float sum's last bits (a stored
    average of 1.117 B a parameter times each tensor's count adds up to the file's bytes plus 1e-11)."""
    return {"group": group, "item": item, "bytes": int(math.ceil(round(nbytes, 6))), "rule": rule}


def kv_lines(m: Model, b: int, n: int, nd: int, kvb: float, spec: ArchSpec | None = None) -> list[tuple[str, float, str]]:
    """The family's KV (or state) cache lines at kvb bytes per element (int4: computed at 1 B, halved), of m's spec or
    the one given (a tp rank's share of a hybrid's mixers: tp_states.rank_states)."""
    cache = m.oracle.kv_cache if m.oracle else get(m.spec.family).kv_cache
    s = spec or m.spec
    if not cache:
        return []
    if float(kvb).is_integer():
        return [(i, float(x), r) for i, x, r in cache(s, b, n, nd, int(kvb))]
    return [(i, x * kvb, f"{r}; at 1 B x {kvb:g} ({kvb * 8:g}-bit, scales not counted)")
            for i, x, r in cache(s, b, n, nd, 1)]


def cache_heads(m: Model) -> int:
    """The heads the counted cache holds, each whole on one device under tensor parallelism: the key/value
    heads, or the family's own (MLA caches one latent per token, which every device keeps whole)."""
    family = get(m.spec.family)
    return family.cache_heads(m.spec) if family.cache_heads else m.spec.kv_heads


def kv_counted(m: Model, lines: list[tuple[str, float, str]]) -> list[tuple[str, float, str]]:
    """The KV lines a device holds together: all of an encoder-decoder's (self + cross attention); a
    decoder's first line only (what transformers allocates; the others are alternatives: a rolling
    window, an absorbed MLA latent, llama.cpp's kv-head cache)."""
    return lines if get(m.spec.family).seq2seq(m.spec) else lines[:1]


def text_input(s: ArchSpec) -> bool:
    """A text transformer, for which the Korthikanti formulas hold (CLIP reads an image too: not one)."""
    return get(s.family).main_input == "input_ids" and not s.image_size


def cross_peak(s: ArchSpec, b: int, n: int, ab: int, t: int, eager: bool, sb: float) -> tuple[float, str]:
    """What a forward with Mllama's image states (ArchSpec.cross_states: S) adds to the inference peak per layer, and
    its rule: the states [b, S, h], held through the forward; under eager attention the b x s x S additive cross mask,
    held through it too, and a cross-attention layer's b x a x s x S scores with its keys and values repeated to the a
    heads [b, a, S, d] each (repeat_kv), where those exceed a self-attention layer's b x a x s^2 scores (eager:
    MemTracker over transformers' forward agrees within 2%, tests/test_vlm_images.py)."""
    S, a, d = s.cross_states, s.heads, s.head_dim
    states = ab * b * S * s.hidden
    if not eager:
        return states, f" + b*S*h x {ab} B image states (S = {S})"
    cross = b * n * S * sb * a / t + 2 * ab * b * S * a * d / t
    return states + ab * b * n * S + max(0.0, cross - b * n * n * sb * a / t), (
        f" + b*S*h x {ab} B image states and b*s*S x {ab} B cross mask (S = {S}) + max(0, a cross-attention layer's "
        "b*(a/tp)*s*S scores and its repeated keys and values 2 x b*(a/tp)*S*d - the s^2 scores)")


def mlp_width(s: ArchSpec) -> tuple[int, str]:
    """The widest MLP activation of one token over the layers the model has, and its rule: a dense layer's f (x3 gated:
    gate, up and their product); a MoE layer's (ArchSpec.moe_layers) routed experts as wide as f (Mixtral, GPT-OSS)
    x top-k, or of their own width (moe_intermediate: Qwen-MoE, DeepSeek, Llama 4, Qwen3-Next) top-k x that + the
    shared expert, beside a dense layer's f. No MoE width where no layer holds experts (the config's default expert
    sizes of a NemotronH pattern without E); no f where the MLP layers are listed (ffn_layers) and all hold experts."""
    g = 3 if s.gated_mlp else 1
    x3 = " x3 gated" if s.gated_mlp else ""
    moe = s.moe_layers
    if not moe:
        return s.intermediate * g, f"f{x3}"
    if not s.moe_intermediate:
        return s.intermediate * g * (s.top_k or 1), f"f{x3}{' x top-k' if s.top_k else ''}"
    routed = (s.moe_intermediate * (s.top_k or 1) + s.shared_intermediate) * g
    if s.ffn_layers and len(moe) == len(s.ffn_layers):   # NemotronH: every MLP layer a MoE, no dense one of f
        return routed, f"top-k x expert f + shared f{x3}"
    return max(s.intermediate * g, routed), f"max(f, top-k x expert f + shared f){x3}"


def activations(m: Model, plan: Plan, b: int, n: int, nd: int, ab: int, stage: str) -> list[Line]:
    """Activation lines for one device: inference holds one layer live (plus logits); training keeps every layer's
    saved tensors (text decoders: what transformers' ops save, saved.py; else Korthikanti et al. 2022), or only layer
    inputs with checkpointing."""
    s = m.spec
    t, pp = plan.tp, plan.pp
    lines: list[Line] = []
    has_logits = s.head in VOCAB_LOGITS and stage != "first"
    out_tok = nd if get(s.family).seq2seq(s) else n
    layers_run = s.layers * s.inner_group + s.decoder_layers
    layers_here = math.ceil(layers_run / pp)
    in_flight = pp if stage == "first" else 1     # 1F1B: the first stage holds pp micro-batches
    if not text_input(s):
        ops = build(s, b, n, nd, a_bytes=ab)
        if plan.mode == "inference":
            peak, peak_rule = module_peak(ops, ab, plan.attention == "eager")
            lines.append(_line("activations", f"peak module, b={b}", peak,
                               f"{peak_rule}, from the op template (image/audio models); replicated under --tp"))
        else:
            saved = sum(o.written * o.calls for o in ops) * (layers_here / max(layers_run, 1)) * in_flight
            lines.append(_line("activations", f"saved for backward, b={b}", saved,
                               f"every module's output x {ab} B, from the op template (image/audio models: no "
                               f"Korthikanti rule); x {in_flight} micro-batches in flight; checkpointing and --tp "
                               "not modelled here"))
        return lines
    h, a = s.hidden, s.heads
    # --attention flash where the model has no fused kernel in transformers: planned as the eager code it runs
    forced = eager_only(s) if plan.attention != "eager" and a > 0 else ""
    eager = plan.attention == "eager" or bool(forced)
    forced_rule = f"; --attention flash: {forced}, planned so" if forced else ""
    if plan.mode == "inference":
        f_eff, f_rule = mlp_width(s)
        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        eager = eager and a > 0   # an attention-free model (no heads): no scores, no mask
        sb, s_rule = eager_scores(ab)
        peak = ab * b * n * (2 * h + max(qkv, f_eff) / t) + (b * n * n * (sb * a / t + ab) if eager else 0)
        scores_rule = (" + b*(a/tp)*s^2 eager scores x " + s_rule if eager else
                       "; flash attention: no s^2 scores" if a else "; no attention layers: no s^2 scores or mask")
        if s.cross_states:   # Mllama with images
            extra, extra_rule = cross_peak(s, b, n, ab, t, eager, sb)
            peak += extra
            scores_rule += extra_rule
        ssm, ssm_rule = ssm_layer(s, b, n, ab, t, eager)
        if ssm:   # a state-space layer's peak, where larger than an attention or MLP layer's
            peak = max(peak, ssm)
            scores_rule += ssm_rule
        lines.append(_line("activations", f"peak per layer, b={b}, s={n}", peak,
                           f"{ab} B x b*s*(2h + max(q+k+v, {f_rule})/tp){scores_rule}; one layer live{forced_rule}"))
        if has_logits:   # soft-capped (Gemma 2): logits / cap, tanh, x cap, each a new tensor beside the last
            copies = 2 if s.logit_softcap else 1
            lines.append(_line("activations", "logits", copies * ab * b * out_tok * s.vocab / t,
                               f"b x s x V x {ab} B / tp (vocab-parallel head)"
                               + (", x2: soft-capping holds two copies" if copies == 2 else "")))
        return lines
    # under autocast the residual stream, the norms and the layers' inputs stay in the weights' float32
    # (autocast.check: its weights are fp32)
    rb = int(FLOAT_BYTES["fp32"]) if plan.autocast else None
    sv = text_saved(m, b, n, ab, eager, layers_run, rb)
    if sv:
        per_layer = sv.replicated + sv.sharded / t
        rule = sv.rule + (f"; tp {t}: the norms' tensors and their outputs (the column-parallel linears' input) "
                          "replicated, the rest / tp" if t > 1 else "")
    else:
        per_layer, rule = korthikanti(s, b, n, ab, t, eager, m.oracle is not None)
        if plan.autocast:
            rule += "; --autocast: at its 16-bit dtype (float32 norms and the linears' casts modelled for text decoders only)"
    rule += forced_rule
    if plan.checkpointing:
        hb = rb or ab
        kept = in_flight * layers_here * n * b * h * hb
        lines.append(_line("activations", f"{layers_here} layer inputs", kept,
                           f"full recomputation: each layer keeps its input, s*b*h x {hb} B (replicated under tp), "
                           f"x {in_flight} micro-batch(es) in flight (1F1B)"))
        lines.append(_line("activations", "one layer recomputed", per_layer, rule))
    else:
        lines.append(_line("activations", f"{layers_here} layers, b={b}, s={n}",
                           in_flight * layers_here * per_layer, rule + f"; {in_flight} micro-batch(es) in flight (1F1B)"))
    if has_logits and sv:
        lines.append(_line("activations", "logits and loss", sv.logits / t + sv.outside, sv.head_rule))
    elif has_logits:
        lines.append(_line("activations", "logits and loss", b * out_tok * s.vocab * (ab + 4) / t,
                           f"b x s x V x ({ab} B logits + 4 B fp32 upcast for the loss) / tp"))
    return lines


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def optimizer_bytes(plan: Plan, st: Stage, moment_bytes: float) -> tuple[float, str]:
    o = plan.optimizer
    if o == "adam":
        return 2 * moment_bytes * st.params, f"Adam/AdamW: exp_avg + exp_avg_sq, 2 x {moment_bytes:g} B/param " \
                                            "(torch's per-tensor step scalars not counted)"
    if o == "adamw-8bit":
        per = 2 + 2 * 4 / BNB_OPTIM_BLOCK
        return per * (st.params - st.small) + 8 * st.small, (
            f"bitsandbytes AdamW8bit: 2 uint8 states + fp32 absmax per {BNB_OPTIM_BLOCK} values = {per:g} B/param; "
            f"{st.small:,.0f} params in tensors under {BNB_MIN_8BIT} elements keep 2 fp32 states, 8 B")
    if o == "sgd":
        return 0, "torch SGD, momentum 0: no state"
    if o == "sgd-momentum":
        return moment_bytes * st.params, f"SGD momentum buffer: {moment_bytes:g} B/param"
    return moment_bytes * st.factored, (f"Adafactor (beta1 None): row + column second moments per matrix, the full "
                                        f"one per vector: {st.factored:,.0f} elements x {moment_bytes:g} B")


def device_lines(m: Model, plan: Plan, sp: Split, b: int, n: int, nd: int, ab: int, stage: str) -> tuple[list[Line], list[Line]]:
    """(lines on one device of `stage`, lines moved to host memory by --cpu-offload)."""
    s = m.spec
    st = stage_share(sp, s, plan, stage)
    dev: list[Line] = []
    host: list[Line] = []
    tp_rule = f"; sharded / tp {plan.tp} + replicated {st.replicated_bytes:,.0f} B" if plan.tp > 1 else ""
    pp_rule = f"; stage {stage} of pp {plan.pp}" if plan.pp > 1 else ""
    wrule = sp.dtype_rule + tp_rule + pp_rule
    training = plan.mode == "training"
    if training and plan.zero == 3:
        dev.append(_line("weights", f"ZeRO-3 shard of {plan.dp}", st.bytes / plan.dp, wrule + f"; / dp {plan.dp}"))
    elif not training and plan.cpu_offload:
        host.append(_line("weights", "offloaded to host", st.bytes, wrule))
        dev.append(_line("weights", "one block streamed in", st.block_bytes,
                         "--cpu-offload: weights live in host memory and each block is copied in when it runs "
                         "(accelerate's offload hooks): the largest block, embedding or head"))
    else:
        dev.append(_line("weights", "resident", st.bytes, wrule))
    if plan.autocast:
        width = FLOAT_BYTES[plan.autocast]
        dev.append(_line("weights", f"{plan.autocast} casts (autocast)", width * st.matmul,
                         amp.copies_rule(plan.autocast, width) + tp_rule))
    if training:
        wb = weight_bytes_per_param(m, plan)
        master = plan.master_weights if plan.master_weights is not None else wb < 4
        moment = 4 if master or wb >= 4 else wb
        grads = (_line("gradients", f"in the weights' dtype{f', ZeRO-{plan.zero} / dp {plan.dp}' if plan.zero >= 2 else ''}",
                       st.params * wb / (plan.dp if plan.zero >= 2 else 1), f"one gradient per parameter x {wb:.4g} B"))
        z1 = plan.dp if plan.zero >= 1 else 1
        z1_rule = f"; ZeRO-{plan.zero} / dp {plan.dp}" if plan.zero >= 1 else ""
        state = [grads]
        if master:
            state.append(_line("master weights", "fp32", 4 * st.params / z1,
                               "mixed precision: an fp32 copy of every parameter, 4 B/param" + z1_rule))
        nbytes, rule = optimizer_bytes(plan, st, moment)
        state.append(_line("optimizer state", plan.optimizer, nbytes / z1, rule + z1_rule))
        if plan.cpu_offload:
            for x in state:
                x["rule"] += "; ZeRO-Offload: on the host"
            host.extend(state)
        else:
            dev.extend(state)
    else:
        kvb = KV_BYTES[plan.kv_dtype] if plan.kv_dtype else ab
        share = math.ceil(layers_stored(s) / plan.pp) / layers_stored(s) if plan.pp > 1 else 1
        heads = cache_heads(m)
        heads_split = min(plan.tp, heads) if heads else 1
        # a hybrid's conv and recurrent states split as vLLM shards its mixer (tp_states.py); its attention layers' K/V
        # by the KV heads. The states are the cache at s = 0 (they do not grow with s); the meta path's spec has no
        # mixer sizes, so its states split with the KV heads
        rank = rank_states(m.spec, plan.tp) if plan.tp > 1 and not m.oracle else None
        states = kv_lines(m, b, 0, nd, kvb)[0][1] if rank else 0.0
        rank_bytes = kv_lines(m, b, 0, nd, kvb, rank[0])[0][1] if rank else 0.0
        for item, nbytes, rule in kv_counted(m, kv_lines(m, b, n, nd, kvb)):
            what = "KV" if rank or not m.spec.ssm else \
                "KV and state-space" if m.spec.ssm_layers and m.spec.heads else "state-space"
            extra = (f"; / {heads_split} ({what} heads over tp {plan.tp}"
                     f"{', replicated beyond ' + str(heads) + (' head' if heads == 1 else ' heads') if plan.tp > heads else ''})"
                     if plan.tp > 1 else "")
            if rank:
                kv = f"attention K/V {nbytes - states:,.0f} B{extra}; " if nbytes > states else ""
                extra = f"; {kv}states {states:,.0f} B, {rank_bytes:,.0f} B per tp rank ({rank[1]}, as vLLM)"
            extra += f"; x {share:.4g} of the layers (pp {plan.pp})" if plan.pp > 1 else ""
            per_device = (nbytes - states) / heads_split + rank_bytes
            dev.append(_line("kv cache", item, per_device * share, rule + extra))
    dev.extend(activations(m, plan, b, n, nd, ab, stage))
    dev.append(_line("runtime reserve", RESERVE_RULE, plan.reserve, plan.reserve_source))
    return dev, host


def stages(plan: Plan) -> tuple[str, ...]:
    return ("first", "last") if plan.pp > 1 else ("all",)


def activation_bytes(m: Model, plan: Plan) -> int:
    wd = plan.weights_dtype
    if plan.autocast:
        return int(FLOAT_BYTES[plan.autocast])
    if wd in FLOAT_BYTES:
        return int(FLOAT_BYTES[wd])
    return 2 if wd in QUANTISED else m.activation_bytes
