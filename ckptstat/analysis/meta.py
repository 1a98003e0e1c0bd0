"""The meta path: FLOPs, parameters and cache bytes of a model no op template describes, from transformers itself.

With the `run` extra installed, a config.json whose model_type transformers knows is built into its causal-LM class
(config.json's `architectures`, else transformers' AutoModelForCausalLM mapping) on the meta device: shapes only, no
weights, no GPU, seconds even at published size. The config is built by AutoConfig.for_model from the file's fields
alone (never the hub, never remote code). One forward of b x s tokens under torch's FlopCounterMode gives the matmul
FLOPs; the cache the forward returns (transformers 5 cache_utils: keys and values of each attention layer, the conv and
recurrent states of linear-attention and state-space layers) gives the cache bytes; the parameters and their
placement come from the model's own modules. Every report says so (`computed_by`). The static path (the families'
op templates) stays the default and needs no torch; this answers only where it refuses, and equals it where both
answer (tests/test_meta.py).

Conventions, as the static path's: eager attention (every score of the s x s square, as FlopCounterMode counts it),
FLOPs = 2 x MACs of mm/addmm/bmm/grouped_mm; active parameters count each routed-experts module's parameters
top_k / num_experts (num_experts_per_tok of its stacked experts), everything else (routers, shared experts,
attention, embeddings) whole."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..census.model import Model, is_bare_config
from ..census.model import load as static_load
from ..errors import NoAnalyticModel, UsageError, one_line
from ..families.framework.archspec import ArchSpec
from ..families.framework.base import DTYPE_BYTES, KVLines, architectures
from ..families.framework.ops import Op
from ..families.generic import not_a_decoder
from ..formats.registry import load_config, open_checkpoint

HINT = "with the `run` extra installed (pip install 'ckptstat[run]'), transformers would compute it on the meta device"
PROBE_SEQ = 8      # the forward the cache rule is read from (tokens)


def available() -> bool:
    """Are torch and transformers importable (the `run` extra)?"""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def grouped_mm_flops(a: Any, b: Any, offs: Any = None, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """FLOPs of aten._grouped_mm, for which FlopCounterMode (torch 2.13) has no formula: transformers 5 runs a MoE's
    routed experts through it (integrations/moe.py grouped_mm_experts_forward). A 2-D input (rows, in) against a 3-D
    weight (groups, in, out): rows offs[g-1]:offs[g] go through group g, each row once, the rows past offs[-1]
    through none (expert parallelism's sentinels). On the meta device the offsets hold no values: every row the
    forward passes goes through an expert (tokens x top_k; without expert parallelism offs[-1] is that count)."""
    assert a.dim() == 2 and b.dim() == 3 and offs is not None and offs.numel() == b.shape[0], (a.shape, b.shape)
    rows = a.shape[0] if offs.device.type == "meta" else int(offs[-1])
    return 2 * rows * a.shape[1] * b.shape[2]


grouped_mm_flops._get_raw = True   # type: ignore[attr-defined]  # FlopCounterMode: pass the tensors, not their shapes


def flop_counter() -> Any:
    """torch's FlopCounterMode, counting grouped_mm too (grouped_mm_flops)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    return FlopCounterMode(display=False, custom_mapping={torch.ops.aten._grouped_mm: grouped_mm_flops})


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
    """Some rotary embeddings open torch.autocast(device_type=x.device.type), which has no meta backend; on meta
    there is nothing to autocast, so it is a no-op there for the forward's duration."""
    import torch
    real = torch.autocast

    def patched(device_type: str, *a: Any, **k: Any) -> Any:
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *a, **k)

    torch.autocast = patched   # type: ignore[assignment,misc]
    try:
        yield
    finally:
        torch.autocast = real   # type: ignore[misc]


def cache_tensors(layer: Any) -> Iterator[tuple[str, Any]]:
    """(kind, tensor) of one transformers 5 cache layer: keys and values, the conv and recurrent states."""
    for kind in ("keys", "values"):
        t = getattr(layer, kind, None)
        if t is not None and t.numel():
            yield "keys and values", t
    for kind, label in (("conv_states", "conv states"), ("recurrent_states", "recurrent states")):
        for t in (getattr(layer, kind, None) or {}).values():
            if t is not None:
                yield label, t


def outside_layers(cache: Any) -> list[Any]:
    """States a cache keeps beside its layers: MiniMaxCache's linear_cache, one [b, a, d, d] lightning-attention state per
    linear layer ([] for the others; modeling_minimax.py)."""
    return [t for t in getattr(cache, "linear_cache", None) or () if hasattr(t, "numel")]


def cache_bytes(cache: Any) -> int:
    """The bytes a forward's cache holds (the oracle the tests compare the rule with)."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for _, t in cache_tensors(layer)) + \
        sum(t.numel() * t.element_size() for t in outside_layers(cache))


class NotADecoder(UsageError):
    """The meta path runs causal language models; transformers has none for this config."""


@dataclass
class MetaModel:
    """One config built on the meta device, and what it answers (census.model.Oracle)."""
    cfg: Mapping[str, Any]
    path: str
    model: Any = None
    version: str = ""
    statement: str = ""
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        import torch
        import transformers as T
        from transformers.models.auto import modeling_auto as auto

        self.version = T.__version__
        mt = self.cfg.get("model_type")
        if not isinstance(mt, str) or mt not in T.CONFIG_MAPPING:
            raise UsageError(f"{self.path}: transformers {self.version} does not know model_type {mt!r} either")
        causal = {*auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(), *auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values()}
        names = [a for a in architectures(self.cfg) if a in causal] or [auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt, "")]
        if not names[0] or not hasattr(T, names[0]):
            raise NotADecoder(f"{self.path}: model_type {mt!r} is no causal language model in transformers {self.version} "
                             "(the meta path runs decoders)")
        try:
            config = T.AutoConfig.for_model(**{k: v for k, v in self.cfg.items() if k != "auto_map"})
            with quiet(), torch.device("meta"):   # bf16: grouped_mm's meta kernel takes no other dtype; FLOPs do not depend on it
                self.model = getattr(T, names[0])._from_config(config, attn_implementation="eager",
                                                               dtype=torch.bfloat16).eval()
        except Exception as e:   # transformers' own validation of a config it cannot build: one line
            raise UsageError(f"{self.path}: transformers {self.version} cannot build {names[0]} from this config "
                             f"({one_line(str(e))[:300]})") from None
        self.statement = (f"computed by transformers {self.version} on the meta device: FlopCounterMode over one forward of "
                          f"{names[0]} built from the config (no weights), cache bytes from the cache that forward returns")

    @property
    def text_config(self) -> Any:
        return self.model.config.get_text_config()

    def forward(self, batch: int, seq: int) -> tuple[Any, Any]:
        """(FlopCounterMode, the cache) of one forward of batch x seq tokens; memoised."""
        key = (batch, seq)
        if key not in self.memo:
            import torch
            counter = flop_counter()
            try:
                with quiet(), torch.no_grad(), meta_autocast(), counter:
                    ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
                    out = self.model(input_ids=ids, use_cache=True)
            except Exception as e:   # an op without a meta kernel, data-dependent control flow
                raise UsageError(f"{self.path}: transformers {self.version} cannot run {type(self.model).__name__} on the "
                                 f"meta device ({type(e).__name__}: {one_line(str(e))[:300]})") from None
            self.memo[key] = (counter, out["cache"] if "cache" in out else out.get("past_key_values"))
        return self.memo[key]

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
                for _, p in own:
                    add(label, "embedding", (), (p.shape[1],), p.numel(), "embedding" if sub is None else "encoder")
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
        routed = [mod for mod in self.model.modules() if isinstance(getattr(mod, "num_experts", None), int)
                  and any(p.dim() == 3 and p.shape[0] == mod.num_experts for p in mod.parameters(recurse=False))]
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
        PROBE_SEQ tokens: a layer of transformers' DynamicLayer grows with every token, a DynamicSlidingWindowLayer
        keeps sliding_window - 1 tokens, conv and recurrent states do not grow; any other layer class is read from a
        forward of b x n tokens itself."""
        import torch
        _, cache = self.forward(1, PROBE_SEQ)
        if cache is None:
            return []
        model_bytes = torch.finfo(torch.bfloat16).bits // 8
        total, parts = 0.0, dict[str, float]()
        exact = None
        for i, layer in enumerate(cache.layers):
            cls = type(layer).__name__
            window = getattr(layer, "sliding_window", None)
            for kind, t in cache_tensors(layer):
                # a state transformers keeps wider than the model (SSM / gated-delta recurrent states in float32)
                wide = t.element_size() > model_bytes
                width = max(ab, t.element_size()) if wide else ab
                if kind != "keys and values":
                    grow, label = 1.0, kind + (f" ({t.element_size()} B whatever the dtype)" if wide else "")
                elif "SlidingWindow" in cls and isinstance(window, int):
                    grow, label = min(n, window - 1) / min(PROBE_SEQ, window - 1), f"keys and values (window {window})"
                elif cls in ("DynamicLayer", "LinearAttentionAndFullAttentionLayer"):
                    grow, label = n / PROBE_SEQ, "keys and values"
                else:   # a layer class whose growth is not known here: measured at this length
                    if exact is None:
                        exact = self.forward(b, n)[1]
                    t = next(x for k, x in cache_tensors(exact.layers[i]) if k == kind)
                    grow, label = 1 / b, f"keys and values ({cls})"
                nbytes = t.numel() * width * grow * b
                total += nbytes
                parts[label] = parts.get(label, 0) + nbytes
        for t in outside_layers(cache):   # lightning-attention states: per sequence, any s
            nbytes = t.numel() * (max(ab, t.element_size()) if t.element_size() > model_bytes else ab) * b
            total += nbytes
            parts["linear attention states"] = parts.get("linear attention states", 0) + nbytes
        rule = "; ".join(f"{k} {v:,.0f} B" for k, v in parts.items())
        return [(f"transformers cache b={b} s={n}", total,
                 f"{type(cache).__name__} of a meta-device forward ({rule}) at {ab} B per element")]

    # -- FLOPs ---------------------------------------------------------------------------------------------------
    def flops_run(self, batch: int, seq: int) -> dict:
        """flops.run's dict from FlopCounterMode: one row per module of the body (consecutive layers alike in class
        and FLOPs as one row), the head apart."""
        counter, _ = self.forward(batch, seq)
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
            if name != body.split(".")[0]:
                row(name, [name], [mod])
        for r in rows:
            r["module"] = f"{r['module']} x{r['calls']}" if r["calls"] > 1 else r["module"]
            r["macs"] = r["flops"] // 2
            del r["_key"]
        fwd = int(counter.get_total_flops())
        tokens = batch * seq
        return {"seq": seq, "dec_seq": None, "tokens": tokens, "modules": rows,
                "totals": {"macs": fwd // 2, "flops": fwd, "flops_per_token": fwd / tokens, "attention_flops": None,
                           "training_flops": 3 * fwd, "elementwise_flops": 0, "training_elementwise_flops": 0,
                           "bytes_read": 0, "bytes_written": 0, "bertstat_madd": self.params * tokens},
                "notes": []}

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
        tdt = self.cfg.get("torch_dtype") or self.cfg.get("dtype")
        return ArchSpec(family="generic", model_type=str(self.cfg["model_type"]),
                        source=f"transformers {self.version} on the meta device", head="lm",
                        architecture=type(self.model).__name__, layers=size("num_hidden_layers"), hidden=h, heads=a,
                        kv_heads=size("num_key_value_heads") or a, head_dim=size("head_dim") or (h // a if a else 0),
                        intermediate=size("intermediate_size", "moe_intermediate_size"), vocab=size("vocab_size"),
                        context=size("max_position_embeddings"), activation=str(read("hidden_act") or "silu"),
                        gated_mlp=True, norm="rmsnorm", tied_embeddings=bool(read("tie_word_embeddings")),
                        experts=size("num_experts", "num_local_experts", "n_routed_experts") if self.active else 0,
                        top_k=size("num_experts_per_tok", "moe_topk", "top_k") if self.active else 0,
                        dtype=tdt if isinstance(tdt, str) and tdt in DTYPE_BYTES else None)


ACTIVE_RULE = ("active parameters: each routed-experts module's parameters x top_k / num_experts (num_experts_per_tok "
               "of its stacked experts), everything else (routers, shared experts, attention, embeddings) whole")


def model_of(cfg: Mapping[str, Any], path: str, config_path: str | None, checkpoint_params: int | None = None,
             param_bytes: dict[str, int] | None = None, why: str = "") -> Model:
    """The census Model of a config answered on the meta device (MetaModel as its oracle)."""
    mm = MetaModel(cfg, path)
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
    return Model(replace(spec), path, config_path, predicted, checkpoint_params, dict(param_bytes or {}), tuple(notes),
                 oracle=mm)


def load(path: str, config: str | None = None) -> Model:
    """census.model.load; where no op template describes the model (UsageError), transformers on the meta device when
    the `run` extra is installed, else the refusal with what would answer."""
    try:
        return static_load(path, config)
    except NoAnalyticModel as e:   # a config the static path refuses for a bad value stays refused
        refusal = e
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
    if not cfg or not isinstance(cfg.get("model_type"), str) or not_a_decoder(cfg):
        raise refusal   # nothing for transformers to build, or no decoder to run (families/not_causal_lm.json)
    if not available():
        raise type(refusal)(f"{refusal}; {HINT}")
    try:
        return model_of(cfg, path, config_path, counted, stored, str(refusal))
    except NotADecoder:
        raise refusal from None
    except (ImportError, OSError) as e:   # an install torch or transformers cannot load from (or no memory to map it)
        raise type(refusal)(f"{refusal}; the meta path could not load torch/transformers: {e}") from None
    except UsageError as e:   # transformers cannot build or run it either: both reasons, one line
        raise type(refusal)(f"{refusal}; on the meta device: {str(e).removeprefix(path + ': ')}") from None
