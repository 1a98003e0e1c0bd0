"""The meta path: FLOPs, parameters and cache bytes of a model no op template describes, from transformers itself.

With the `run` extra installed, a config.json whose model_type transformers knows is built on the meta device: shapes
only, no weights, no GPU, seconds even at published size. The class is config.json's `architectures` (a causal LM
first), else transformers' AutoModelForCausalLM mapping, else (an encoder, a vision or an audio model) its base model
(AutoModel's mapping). The config is built by AutoConfig.for_model from the file's fields alone (never the hub, never
remote code). One forward under torch's FlopCounterMode gives the matmul FLOPs: b x s token ids for a text model (a
decoder with use_cache; an encoder-decoder's decoder reads the same s tokens), b images at the config's image_size (or
--image-size) for a vision model (s unused), b x s raw samples for an audio model reading waveforms (input_values);
models reading other inputs (spectrogram features, several modalities at once) are refused with what they read. The
cache a decoder's forward returns (transformers 5 cache_utils: keys and values of each attention layer, the conv and
recurrent states of linear-attention and state-space layers) gives the cache bytes; encoders keep none. The parameters
and their placement come from the model's own modules. Every report says so (`computed_by`). The static path (the
families' op templates) stays the default and needs no torch; this answers only where it refuses, and equals it where
both answer (tests/test_meta.py).

Conventions, as the static path's: eager attention (every score of the s x s square, as FlopCounterMode counts it),
FLOPs = 2 x MACs of mm/addmm/bmm/grouped_mm/convolution; active parameters count each routed-experts module's
parameters top_k / num_experts (num_experts_per_tok of its stacked experts), everything else (routers, shared experts,
attention, embeddings) whole."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..census.model import Model, folder_config, is_bare_config
from ..census.model import load as static_load
from ..errors import NoAnalyticModel, UsageError, one_line
from ..families import get
from ..families.fp32_table import kept_float32
from ..families.framework.archspec import SEQ_UNITS, ArchSpec
from ..families.framework.base import CHOICE, DTYPE_BYTES, KVLines, architectures, check_layer_counts, config_dtype
from ..families.framework.ops import Op
from ..formats.configs import load_config
from ..formats.registry import open_checkpoint
from .torch_flops import flop_counter

MAX_META_LAYERS = 512   # transformers builds (and the forward runs) every layer: ~10 ms each on the meta device

HINT = "with the `run` extra installed (pip install 'ckptstat[run]'), transformers would compute it on the meta device"
PROBE_SEQ = 8      # the forward the cache rule is read from (tokens)


def available() -> bool:
    """Are torch and transformers importable (the `run` extra)?"""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers' advice (kernels not installed, deprecations) and warnings off while it builds and runs: the
    report says what ran."""
    import warnings

    from transformers.utils import logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(level)


@contextlib.contextmanager
def meta_autocast() -> Iterator[None]:
    """What a meta-device forward cannot ask, answered for its duration. Some rotary embeddings open
    torch.autocast(device_type=x.device.type), which has no meta backend; on meta there is nothing to autocast, so it
    is a no-op there."""
    import torch
    real = torch.autocast

    def patched(device_type: str, *a: Any, **k: Any) -> Any:
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *a, **k)

    # An encoder makes an all-ones padding mask when given none, and transformers asks whether it holds padding
    # (.all(), which the meta device cannot answer) to skip building the mask: the ids fed here have none, so the
    # answer is the question's other terms (masking_utils._ignore_bidirectional_mask_sdpa); no FLOP depends on it.
    from transformers import masking_utils
    real_skip = masking_utils._ignore_bidirectional_mask_sdpa

    def skip(padding_mask: Any, kv_length: int, local_attention_size: int | None = None) -> bool:
        if padding_mask is not None and padding_mask.device.type == "meta":
            return local_attention_size is None or kv_length < local_attention_size
        return bool(real_skip(padding_mask, kv_length, local_attention_size))

    torch.autocast = patched   # type: ignore[assignment,misc]
    masking_utils._ignore_bidirectional_mask_sdpa = skip
    try:
        yield
    finally:
        torch.autocast = real   # type: ignore[misc]
        masking_utils._ignore_bidirectional_mask_sdpa = real_skip


# DeepSeek-V4's compressor states (modeling_deepseek_v4.py DeepseekV4HCACache, DeepseekV4CSACache): per name (compressor,
# indexer) the compressed entries, an unclosed window's kv and gate, a CSA layer's last window (overlap)
COMPRESSOR_STATES = ("compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate")


def cache_tensors(layer: Any) -> Iterator[tuple[str, Any]]:
    """(kind, tensor) of one transformers 5 cache layer: keys and values (values once where they are the keys, as
    DeepSeek-V4's compressed layers hold them; with a sparse-attention indexer's keys, DynamicIndexedLayer's
    indexer_keys: DeepSeek-V3.2, GLM-5, which grow with the tokens as keys do), the conv and recurrent states, and
    DeepSeek-V4's compressor states."""
    seen: list[Any] = []
    for kind in ("keys", "values", "indexer_keys"):
        t = getattr(layer, kind, None)
        if t is not None and t.numel() and not any(t is x for x in seen):
            seen.append(t)
            yield "keys and values", t
    for kind, label in (("conv_states", "conv states"), ("recurrent_states", "recurrent states"),
                        *((k, "compressor states") for k in COMPRESSOR_STATES)):
        for t in (getattr(layer, kind, None) or {}).values():
            if t is not None:
                yield label, t


@dataclass
class StateLayer:
    """A layer of a cache that is not transformers' layered Cache, as cache_tensors reads one: its recurrent states."""
    recurrent_states: dict[int, Any]


def cache_layers(cache: Any) -> list[Any]:
    """A forward's cache as layers: transformers 5's Cache.layers, or a model's own cache of per-layer recurrent states
    (xLSTM's xLSTMCache.rnn_state: each layer's C, n and m, which do not grow with the tokens)."""
    if hasattr(cache, "layers"):
        return list(cache.layers)
    states = getattr(cache, "rnn_state", None)
    if isinstance(states, dict):
        return [StateLayer(dict(enumerate(v))) for v in states.values()]
    raise NoAnalyticModel(f"transformers' cache {type(cache).__name__} has no layers to read")


def outside_layers(cache: Any) -> list[Any]:
    """States a cache keeps beside its layers: MiniMaxCache's linear_cache, one [b, a, d, d] lightning-attention state per
    linear layer ([] for the others; modeling_minimax.py)."""
    return [t for t in getattr(cache, "linear_cache", None) or () if hasattr(t, "numel")]


def cache_bytes(cache: Any) -> int:
    """The bytes a forward's cache holds: each distinct storage once, whole (a sliding layer's window is a view of
    all the forward's states, whose storage it keeps)."""
    tensors = [t for layer in cache_layers(cache) for _, t in cache_tensors(layer)] + outside_layers(cache)
    storages = {}
    for t in tensors:
        storage = t.untyped_storage()
        storages[storage._cdata] = storage.nbytes()
    return sum(storages.values())


class NotRunnable(UsageError):
    """A model the meta path cannot feed: transformers has no class for the config, or its class reads inputs other
    than token ids, images or raw audio."""


# what the meta path feeds a class, by its main_input_name
INPUTS = {"input_ids": "token ids", "pixel_values": "images", "input_values": SEQ_UNITS["samples"]}


def _class_name(names: Any) -> str:
    """One class name of an auto mapping's value (a name, or a tuple of names: the first)."""
    return names if isinstance(names, str) else (names[0] if names else "")


def image_sides(config: Any, side: int = 0) -> tuple[int, int]:
    """(height, width) of the image a vision model is run on: `side` x `side` when given (--image-size), else the
    config's image_size (an int, or [height, width]), else 224 (transformers' ResNet-style processors)."""
    if side:
        return side, side
    size = getattr(config, "image_size", None)
    if isinstance(size, int) and size > 0:
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(x, int) and x > 0 for x in size):
        return int(size[0]), int(size[1])
    return 224, 224


@dataclass
class MetaModel:
    """One config built on the meta device, and what it answers (census.model.Oracle)."""
    cfg: Mapping[str, Any]
    path: str
    model: Any = None
    version: str = ""
    statement: str = ""
    memo: dict = field(default_factory=dict)
    config: Any = None                 # the transformers config built from cfg
    decoder: bool = True               # a causal LM (a cache), else an encoder, vision or audio model
    inputs: str = "input_ids"          # its main_input_name (INPUTS)
    # a *ForMultipleChoice: fed one example of `batch` choices, input_ids [1, batch, seq] (the op templates' convention:
    # the batch counts batch x num_choices sequences)
    choices: bool = False
    # why the op template did not answer (meta.load's refusal, one line), said first when the forward fails here too
    refused: str = ""

    def __post_init__(self) -> None:
        import torch
        import transformers as T
        from transformers.models.auto import modeling_auto as auto

        self.version = T.__version__
        mt = self.cfg.get("model_type")
        if not isinstance(mt, str) or mt not in T.CONFIG_MAPPING:
            raise UsageError(f"{self.path}: transformers {self.version} does not know model_type {mt!r} either")
        causal = {*auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(), *auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values()}
        known = [a for a in architectures(self.cfg) if hasattr(T, a)]
        names = [a for a in known if a in causal] or known or [auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt, "")]
        if not names[0]:   # an encoder's config naming no class (EuroBERT's saved without architectures): its base model
            names = [_class_name(auto.MODEL_MAPPING_NAMES.get(mt, ""))]
        if not names[0] or not hasattr(T, names[0]):
            raise NotRunnable(f"{self.path}: transformers {self.version} has no model class for model_type {mt!r}")
        self.decoder = names[0] in causal
        self.choices = names[0].endswith("ForMultipleChoice")
        self.inputs = getattr(getattr(T, names[0]), "main_input_name", "input_ids")
        if self.inputs not in INPUTS:
            raise NotRunnable(f"{self.path}: {names[0]} reads {self.inputs}; the meta path runs models reading "
                              + ", ".join(INPUTS.values()))
        check_layer_counts(self.cfg, self.path, MAX_META_LAYERS)
        try:
            self.config = T.AutoConfig.for_model(**{k: v for k, v in self.cfg.items() if k != "auto_map"})
            self._build(getattr(T, names[0]), torch.bfloat16)
        except Exception as e:   # transformers' own validation of a config it cannot build: one line
            raise UsageError(f"{self.path}: transformers {self.version} cannot build {names[0]} from this config "
                             f"({one_line(str(e))[:300]})") from None
        self.statement = (f"computed by transformers {self.version} on the meta device: FlopCounterMode over one forward of "
                          f"{names[0]} built from the config (no weights) reading {INPUTS[self.inputs]}"
                          + (" [1, batch, seq]: one example whose choices are the batch's sequences" if self.choices else "")
                          + (", cache bytes from the cache that forward returns" if self.decoder else ", no cache"))

    def _build(self, cls: Any, dtype: Any) -> None:
        """The model on the meta device in `dtype`: bf16 first (grouped_mm's meta kernel takes no other dtype), float32
        for a model whose own buffers or kernels are float32-only (DeBERTa, XLNet, FNet); FLOPs do not depend on it."""
        import torch
        with quiet(), torch.device("meta"):
            self.model = cls._from_config(self.config, attn_implementation="eager", dtype=dtype).eval()
        self.model.requires_grad_(False)   # FlopCounterMode's module hooks: a no_grad view of a weight has no grad_fn
        for mod in self.model.modules():   # a warning's look for padding in the ids (.item(): no meta kernel); no FLOP
            if hasattr(mod, "warn_if_padding_and_no_attention_mask"):
                mod.warn_if_padding_and_no_attention_mask = lambda *args, **kwargs: None
        self.memo.clear()

    @property
    def text_config(self) -> Any:
        return self.model.config.get_text_config()

    def forward(self, batch: int, seq: int, image: int = 0) -> tuple[Any, Any]:
        """(FlopCounterMode, the cache) of one forward of batch x seq tokens (batch images of side `image`, else the
        config's; batch x seq raw samples); memoised."""
        key = (batch, seq, image)
        if key not in self.memo:
            import torch
            for dtype in (torch.bfloat16, torch.float32)[1 if self.model.dtype == torch.float32 else 0:]:
                if self.model.dtype != dtype:
                    self._build(type(self.model), dtype)
                try:
                    kinds = [type(mod) for mod in self.model.modules()]
                    counter, out = self._run(batch, seq, image)
                    if [type(mod) for mod in self.model.modules()] != kinds:
                        # a forward that swapped modules of its own (BigBird's switch to full attention for a short
                        # sequence, for good): the next one runs the model the config builds
                        memo = dict(self.memo)
                        self._build(type(self.model), self.model.dtype)
                        self.memo.update(memo)
                    break
                except Exception as e:   # an op without a meta kernel, data-dependent control flow, a float32-only op
                    if dtype == torch.bfloat16 and re.search(r"dtype|scalar type|BFloat16", str(e)):
                        continue
                    audio = self.inputs == "input_values"
                    hint = f"; --seq counts {INPUTS[self.inputs]} (16,000 a second at 16 kHz)" if audio else ""
                    why = (f"{self.refused}; on the meta device: transformers {self.version} cannot run "
                           if self.refused else f"{self.path}: transformers {self.version} cannot run ")
                    raise UsageError(f"{why}{type(self.model).__name__}"
                                     f"{'' if self.refused else ' on the meta device'} ({type(e).__name__}: "
                                     f"{one_line(str(e))[:300]}){hint}") from None
            cache = (out["cache"] if "cache" in out else out.get("past_key_values")) if self.decoder else None
            self.memo[key] = (counter, cache)
        return self.memo[key]

    def _run(self, batch: int, seq: int, image: int) -> tuple[Any, Any]:
        import torch
        counter, config = flop_counter(), self.model.config
        args: dict[str, Any]
        with quiet(), torch.no_grad(), meta_autocast(), counter:
            if self.inputs == "pixel_values":
                h, w = image_sides(config, image)
                args = {"pixel_values": torch.zeros((batch, getattr(config, "num_channels", 3), h, w),
                                                    dtype=self.model.dtype, device="meta")}
            elif self.inputs == "input_values":
                args = {"input_values": torch.zeros((batch, seq), dtype=self.model.dtype, device="meta")}
            else:
                ids = torch.zeros((1, batch, seq) if self.choices else (batch, seq), dtype=torch.long, device="meta")
                args = {"input_ids": ids, "use_cache": True} if self.decoder else {"input_ids": ids}
                if not self.decoder and getattr(config, "is_encoder_decoder", False):
                    args["decoder_input_ids"] = ids   # the decoder reads as many tokens (flops.run's dec_seq)
            return counter, self.model(**args)

    # -- parameters ----------------------------------------------------------------------------------------------
    @functools.cached_property
    def layer_prefix(self) -> str | None:
        """The ModuleList of the decoder layers (num_hidden_layers long), as named_modules names it."""
        import torch
        L = getattr(self.text_config, "num_hidden_layers", None)
        return next((n for n, mod in self.model.named_modules() if isinstance(mod, torch.nn.ModuleList) and len(mod) == L), None)

    def _in_layer(self, name: str) -> str | None:
        """A module name under the layer list, less the list and the layer's index; None outside the layers."""
        p = self.layer_prefix
        return re.sub(r"^\d+\.?", "", name[len(p) + 1:]) if p and name.startswith(p + ".") else None

    @functools.cached_property
    def param_ops(self) -> list[Op]:
        """The parameterised modules as the planner places them (planner.split): linears and stacked experts by
        their [.., out, in] matrices, embeddings by rows, 1-D parameters replicated; a layer's modules as one op per
        module name across the layers that hold it, labelled layers[n] (planner.LAYER_GROUP)."""
        import torch
        groups: dict[tuple[str, str, tuple[int, ...], tuple[int, ...], str], list[int]] = {}
        seen: set[int] = set()
        for name, mod in self.model.named_modules():
            own = [(k, p) for k, p in mod.named_parameters(recurse=False) if id(p) not in seen]
            seen.update(id(p) for _, p in own)
            sub = self._in_layer(name)
            label = name if sub is None else f"{self.layer_prefix}[{{n}}].{sub}"

            def add(what: str, kind: str, fin: tuple[int, ...], fout: tuple[int, ...], params: int,
                    bucket: str = "encoder") -> None:
                groups.setdefault((what, kind, fin, fout, bucket), []).append(params)

            if isinstance(mod, torch.nn.Linear) and sub is None and name.split(".")[-1] == "lm_head":
                # a tied head's weight is the embedding's (named_parameters gives it once): 0 here, as the templates
                add(label, "linear", (mod.in_features,), (mod.out_features,), sum(p.numel() for _, p in own), "cls")
            elif isinstance(mod, torch.nn.Embedding):
                for k, p in own:   # its table; a vector beside it (T5Gemma2's eoi_embedding, one row) is a 1-D parameter
                    if p.dim() == 2:
                        add(label, "embedding", (), (p.shape[1],), p.numel(), "embedding" if sub is None else "encoder")
                    else:
                        add(f"{label}.{k}", "1-D parameter", (), (p.shape[0],), p.numel())
            elif isinstance(mod, torch.nn.Linear) and own:
                add(label, "linear", (mod.in_features,), (mod.out_features,), sum(p.numel() for _, p in own))
            else:
                for k, p in own:
                    if p.dim() >= 2:   # stacked experts [E, out, in] (or [E, in, out]), convolutions: split like linears
                        add(f"{label}.{k}", "linear", (p.shape[-1],), (p.shape[-2],), p.numel())
                    else:
                        kind = "norm" if "norm" in type(mod).__name__.lower() else "1-D parameter"
                        add(f"{label}.{k}", kind, (), (p.shape[0],), p.numel())
        return [Op(what.format(n=len(sizes)), kind, bucket, len(sizes), fin, fout, sum(sizes), 0, 0, 0, 0)
                for (what, kind, fin, fout, bucket), sizes in groups.items()]

    def ops(self) -> list[Op]:
        return self.param_ops

    @functools.cached_property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @functools.cached_property
    def active(self) -> int | None:
        """Parameters one token uses: each routed-experts module's (a module holding num_experts stacked experts)
        top_k / num_experts, the rest whole; None for a model without routed experts."""
        k = next((getattr(self.text_config, a) for a in ("num_experts_per_tok", "moe_topk", "top_k")
                  if isinstance(getattr(self.text_config, a, None), int)), None)
        routed = [mod for mod in self.model.modules() if isinstance(E := getattr(mod, "num_experts", None), int) and E > 0
                  and any(p.dim() == 3 and p.shape[0] == E for p in mod.parameters(recurse=False))]
        if not routed or not k:
            return None
        out = self.params
        for mod in routed:
            E = mod.num_experts
            out -= sum(p.numel() // E * (E - k) for p in mod.parameters(recurse=False))
        return out

    # -- cache ---------------------------------------------------------------------------------------------------
    def kv_cache(self, s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
        """One line: the bytes of the cache after a forward of b x n tokens, at ab bytes per element (a state transformers
        keeps wider than the model's dtype, float32 in a bf16 model, at least at its own width). Read from one forward of
        PROBE_SEQ tokens: a layer of transformers' DynamicLayer grows with every token, and so does what a
        DynamicSlidingWindowLayer holds after one forward (a view of its last sliding_window - 1 tokens keeps the
        forward's whole storage: families/framework/base.py SLIDING_HELD); conv and recurrent states do not grow; any
        other layer class is read from a forward of b x n tokens itself. Each tensor counts its storage (cache_bytes)."""
        import torch
        _, cache = self.forward(1, PROBE_SEQ)
        if cache is None:
            return []
        model_bytes = torch.finfo(self.model.dtype).bits // 8
        total, parts = 0.0, dict[str, float]()
        exact = None

        def width(t: Any) -> int:   # a state transformers keeps wider than the model (float32 SSM / DeltaNet states)
            return max(ab, t.element_size()) if t.element_size() > model_bytes else ab

        def held(t: Any) -> int:    # the elements of its storage: a view keeps its base's whole
            return t.untyped_storage().nbytes() // t.element_size()

        for i, layer in enumerate(cache_layers(cache)):
            cls = type(layer).__name__
            window = getattr(layer, "sliding_window", None)
            if any(getattr(layer, k, None) for k in COMPRESSOR_STATES):   # states of the length: measured at it
                if exact is None:
                    exact = self.forward(b, n)[1]
                for kind, t in cache_tensors(cache_layers(exact)[i]):
                    label = f"{kind} ({cls})"
                    parts[label] = parts.get(label, 0) + held(t) * width(t)
                    total += held(t) * width(t)
                continue
            for j, (kind, t) in enumerate(cache_tensors(layer)):
                if kind != "keys and values":
                    wider = t.element_size() > model_bytes
                    grow, label = 1.0, kind + (f" ({t.element_size()} B whatever the dtype)" if wider else "")
                elif "SlidingWindow" in cls and isinstance(window, int):
                    grow, label = n / PROBE_SEQ, f"keys and values (window {window}, the forward's storage held)"
                elif cls in ("DynamicLayer", "LinearAttentionAndFullAttentionLayer"):
                    grow, label = n / PROBE_SEQ, "keys and values"
                else:   # a layer class whose growth is not known here: measured at this length
                    if exact is None:
                        exact = self.forward(b, n)[1]
                    t = list(cache_tensors(cache_layers(exact)[i]))[j][1]   # the same tensor (keys, values, indexer keys)
                    grow, label = 1 / b, f"keys and values ({cls})"
                nbytes = held(t) * width(t) * grow * b
                total += nbytes
                parts[label] = parts.get(label, 0) + nbytes
        for t in outside_layers(cache):   # lightning-attention states: per sequence, any s
            nbytes = held(t) * width(t) * b
            total += nbytes
            parts["linear attention states"] = parts.get("linear attention states", 0) + nbytes
        rule = "; ".join(f"{k} {v:,.0f} B" for k, v in parts.items())
        return [(f"transformers cache b={b} s={n}", total,
                 f"{type(cache).__name__} of a meta-device forward ({rule}) at {ab} B per element")]

    # -- FLOPs ---------------------------------------------------------------------------------------------------
    def flops_run(self, batch: int, seq: int, image: int = 0) -> dict:
        """flops.run's dict from FlopCounterMode: one row per module of the body (consecutive layers alike in class
        and FLOPs as one row), the head apart; a vision model's tokens are its images (`seq` unused)."""
        counter, _ = self.forward(batch, seq, image)
        counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
        top = type(self.model).__name__
        rows: list[dict[str, Any]] = []

        def row(label: str, names: list[str], mods: list[Any]) -> None:
            f = sum(counts.get(f"{top}.{nm}", 0) for nm in names)
            p = sum(q.numel() for mod in mods for q in mod.parameters())
            if rows and rows[-1]["_key"] == (label, f // len(names), p // len(names)) and label.startswith("layers"):
                rows[-1]["calls"] += len(names)
                rows[-1]["flops"] += f
                rows[-1]["params"] += p
                return
            rows.append({"_key": (label, f // len(names), p // len(names)), "module": label, "kind": "measured",
                         "bucket": "encoder", "calls": len(names), "in_shape": [], "out_shape": [], "params": p,
                         "flops": f, "elementwise_flops": 0, "bytes_read": 0, "bytes_written": 0})

        body = self.layer_prefix.rsplit(".", 1)[0] if self.layer_prefix and "." in self.layer_prefix else ""
        body_mod = self.model.get_submodule(body) if body else self.model
        for name, mod in body_mod.named_children():
            full = f"{body}.{name}".lstrip(".")
            if full == self.layer_prefix:
                for i, layer in enumerate(mod):
                    row(f"layers ({type(layer).__name__})", [f"{full}.{i}"], [layer])
            else:
                row(full, [full], [mod])
        for name, mod in self.model.named_children():
            if body and name != body.split(".")[0]:   # (no layer list found: the model's children are the body)
                row(name, [name], [mod])
        for r in rows:
            r["module"] = f"{r['module']} x{r['calls']}" if r["calls"] > 1 else r["module"]
            r["macs"] = r["flops"] // 2
            del r["_key"]
        fwd = int(counter.get_total_flops())
        tokens = batch if self.inputs == "pixel_values" else batch * seq
        return {"seq": seq, "dec_seq": None, "tokens": tokens, "modules": rows,
                "totals": {"macs": fwd // 2, "flops": fwd, "flops_per_token": fwd / tokens, "attention_flops": None,
                           "training_flops": 3 * fwd, "elementwise_flops": 0, "training_elementwise_flops": 0,
                           "bytes_read": 0, "bytes_written": 0, "bertstat_madd": self.params * tokens},
                "notes": [f"one image of {'x'.join(map(str, image_sides(self.model.config, image)))} pixels a sample: "
                          "per-token figures are per image"] if self.inputs == "pixel_values" else self.spec().seq_notes(seq)}

    # -- the census record ---------------------------------------------------------------------------------------
    def spec(self) -> ArchSpec:
        """The sizes the planner's activation estimates read (the text config's), under the generic family's
        record (a decoder reading token ids): its template is never walked, the oracle answers instead."""
        c = self.text_config

        def read(key: str) -> Any:
            try:
                return getattr(c, key, None)
            except Exception:   # noqa: BLE001 - transformers 5 refuses a per-layer size read globally (Gemma 4's
                return c.to_dict().get(key)   # head_dim): the value the config holds, as the activation estimate's

        def size(*keys: str) -> int:
            return next((v for k in keys if isinstance(v := read(k), int) and not isinstance(v, bool)), 0)

        h, a = size("hidden_size", "d_model"), size("num_attention_heads")
        tdt = config_dtype(self.cfg)
        return ArchSpec(family="generic", model_type=str(self.cfg["model_type"]),
                        source=f"transformers {self.version} on the meta device",
                        head="lm" if self.decoder else CHOICE if self.choices
                        else "mlm" if type(self.model).__name__.endswith("ForMaskedLM") else "base",
                        architecture=type(self.model).__name__, layers=size("num_hidden_layers"), hidden=h, heads=a,
                        # the heads tensor parallelism splits the cache by: a model without attention, its mixer's
                        # (Mamba2's num_heads), as the static path's Family.cache_heads
                        kv_heads=size("num_key_value_heads") or a or size("num_heads"),
                        head_dim=size("head_dim") or (h // a if a else 0),
                        intermediate=size("intermediate_size", "moe_intermediate_size"), vocab=size("vocab_size"),
                        context=size("max_position_embeddings"), activation=str(read("hidden_act") or "silu"),
                        gated_mlp=True, norm="rmsnorm", tied_embeddings=bool(read("tie_word_embeddings")),
                        experts=size("num_experts", "num_local_experts", "n_routed_experts") if self.active else 0,
                        top_k=size("num_experts_per_tok", "moe_topk", "top_k") if self.active else 0,
                        dtype=tdt if isinstance(tdt, str) and tdt in DTYPE_BYTES else None,
                        image_size=image_sides(self.model.config)[0] if self.inputs == "pixel_values" else 0,
                        seq_unit="samples" if self.inputs == "input_values" else "tokens")


ACTIVE_RULE = ("active parameters: each routed-experts module's parameters x top_k / num_experts (num_experts_per_tok "
               "of its stacked experts), everything else (routers, shared experts, attention, embeddings) whole")


def model_of(cfg: Mapping[str, Any], path: str, config_path: str | None, checkpoint_params: int | None = None,
             param_bytes: dict[str, int] | None = None, why: str = "") -> Model:
    """The census Model of a config answered on the meta device (MetaModel as its oracle)."""
    mm = MetaModel(cfg, path, refused=why)
    spec = mm.spec()
    predicted: dict[str, Any] = {"total": mm.params, "buckets": {}}
    for op in mm.param_ops:
        predicted["buckets"][op.bucket] = predicted["buckets"].get(op.bucket, 0) + op.params
    notes = [f"no analytic model{f' ({why})' if why else ''}: {mm.statement}"]
    if mm.active is not None:
        predicted["active"] = mm.active
        notes.append(ACTIVE_RULE)
    if checkpoint_params is not None and checkpoint_params != mm.params:
        notes.append(f"transformers builds {mm.params:,} parameters from the config, the checkpoint holds "
                     f"{checkpoint_params:,}: the weights and the config disagree; FLOPs follow the config")
    if spec.dtype is None and not param_bytes:
        notes.append("no weights and no torch_dtype in the config: weight bytes assume float32")
    kept = kept_float32(cfg, lambda: ((n, p.numel()) for n, p in mm.model.named_parameters()))
    return Model(replace(spec), path, config_path, predicted, checkpoint_params, dict(param_bytes or {}), tuple(notes),
                 oracle=mm, config=cfg, float32_kept=kept)


def _without_flops(m: Model, why: str) -> Model:
    """`m` less its active parameter count, with a note saying why its FLOPs (and that count) are not described."""
    active = "active" in m.predicted
    return replace(m, predicted={k: v for k, v in m.predicted.items() if k != "active"}, notes=(*m.notes, (
        f"{why}: the {m.spec.family} op template describes its parameters and cache, not its FLOPs"
        f"{' or its active parameters' if active else ''}")))


def load(path: str, config: str | None = None, seqs: Collection[int] = (), flops: bool = True) -> Model:
    """census.model.load; where no op template describes the model (UsageError), or not at one of the sequence lengths
    `seqs` the caller will run (Family.longest_seq), transformers on the meta device when the `run` extra is installed,
    else the refusal with what would answer. flops=False (`memory`, which counts no FLOPs): a family's refusal of the
    FLOPs alone (Family.flops_refused: its parameters and cache are described) keeps the op template's model. A
    folder holding a config.json and no weights is its config."""
    if (alone := folder_config(path, config)) is not None:
        m = load(alone, None, seqs, flops)
        return replace(m, notes=(*m.notes, f"{path} holds no weights file: from its config.json alone"))
    try:
        m = static_load(path, config)
    except NoAnalyticModel as e:   # a config the static path refuses for a bad value stays refused
        refusal = e
    else:
        family = get(m.spec.family)
        limit = family.longest_seq(m.spec) if family.longest_seq is not None else None
        why = family.flops_refused(m.spec) if family.flops_refused is not None else None
        if limit is None or all(n <= limit for n in seqs):
            if why is None:
                return m
            if not flops:   # the routing that decides the FLOPs decides which parameters run: no active count
                return _without_flops(m, why)
        refusal = NoAnalyticModel(f"{path}: {why}: the {m.spec.family} op template describes its parameters, not its FLOPs"
                                  if why else f"{path}: the {m.spec.family} op template describes {m.spec.model_type} up to "
                                  f"--seq {limit:,}, not {max(seqs):,}")
    cfg: Mapping[str, Any] | None
    config_path: str | None
    if is_bare_config(path) and config is None:
        cfg, config_path, counted, stored = load_config(path), path, None, None
    else:
        from ..census.model import weights_of
        ckpt = open_checkpoint(path, config)
        cfg, config_path = ckpt.config, ckpt.config_path
        w = weights_of(ckpt, "")
        counted, stored = (w.params, w.param_bytes) if w else (None, None)
    if not cfg or not isinstance(cfg.get("model_type"), str):
        raise refusal   # nothing for transformers to build
    if not available():
        raise type(refusal)(f"{refusal}; {HINT}")
    try:
        return model_of(cfg, path, config_path, counted, stored, str(refusal))
    except NotRunnable:
        raise refusal from None
    except (ImportError, OSError) as e:   # an install torch or transformers cannot load from (or no memory to map it)
        raise type(refusal)(f"{refusal}; the meta path could not load torch/transformers: {e}") from None
    except UsageError as e:   # transformers cannot build or run it either: both reasons, one line
        raise type(refusal)(f"{refusal}; on the meta device: {str(e).removeprefix(path + ': ')}") from None
