"""GraniteSWA (transformers modeling_granite_swa.py): Granite's LLaMA layout (layout.py) with a learned sink per
head and layer (self_attn.sinks; its eager attention rescales the output by sigmoid(logsumexp(scores) - sink), the
extra softmax logit of gpt-oss's sinks by transformers' own account: counted as gpt-oss's), layers that slide by
layer_types (by default every 4th layer full, the rest sliding, window 128), no rotary on the layers
layer_rope_theta sets to 0, and the LM head tied by default. Granite's scalar multipliers (embedding, residual,
attention, logits) are element-wise and not counted; a rotary table per distinct theta is counted as one."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout

GRANITE_SWA = DecoderLayout(sinks=True, nope="theta", tied_default=True)


def from_config(c: Cfg, lay: DecoderLayout = GRANITE_SWA) -> ArchSpec:
    """The layout's spec with GraniteSWAConfig's sliding layers (GraniteMoE-SWA's too: granitemoe.py)."""
    spec = layout.spec_from_config(lay, c)
    L = spec.layers
    window = c.get("sliding_window", default=FROM_CLASS)
    types = c.get("layer_types", default=None)
    if types is None:   # GraniteSWAConfig.__post_init__'s rule
        types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L:
        raise UsageError(f"{c.path}: config layer_types = {types!r} is not a list of {L} layer types")
    slide = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0 or not slide:
        return replace(spec, sliding_window=None, sliding_layers=())
    return replace(spec, sliding_window=window, sliding_layers=() if len(slide) == L else slide)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's shapes (head_dim exact from the sinks, one per query head); which layers slide no tensor shows."""
    spec = layout.spec_from_tensors(GRANITE_SWA, T, dict(common, model_type="granite_swa"))
    why = "no config: no sliding layers assumed (only the KV cache depends on them)"
    return replace(spec, assumptions=spec.assumptions + (why,))


_SIZES = dict(layout.TINY, num_hidden_layers=5, sliding_window=4, pad_token_id=0)

FAMILY = Family(
    name="granite_swa",
    # LLaMA's names and the sinks
    **{**layout.family_fields({"granite_swa": GRANITE_SWA}, "attn_sinks"), "from_config": from_config,
       "from_tensors": from_tensors, "gguf_tensor_names": ()},   # llama.cpp has no granite_swa architecture
    # a dense MLP: gpt-oss's and Flint's sinks come with routed experts
    signature_without=r"(^|[./])mlp[./](experts|router)[./]",
    before=("llama", "gpt_oss", "flint"),   # LLaMA's q_proj and their sinks signatures match its files too
    samples=(
        Sample("GraniteSWAConfig", _SIZES, ("GraniteSWAModel", "GraniteSWAForCausalLM")),
        Sample("GraniteSWAConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                                        layer_rope_theta=[10000.0, 0, 10000.0, 0, 0]), ("GraniteSWAForCausalLM",)),
    ),
)
