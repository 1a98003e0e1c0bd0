"""A LoRA saved as one file without a PEFT config (docs/adapters.md, "LoRA files"), under either of two namings:

- kohya's: what sd-scripts writes and AUTOMATIC1111, ComfyUI, model sites and diffusers' `load_lora_weights` read.
  Each adapted module is one name, its path with `_` for `.` after a part's prefix
  (`lora_unet_down_blocks_0_attentions_0_proj_in`, `lora_te_text_model_encoder_layers_0_self_attn_q_proj`; `lora_te1_`
  / `lora_te2_` for XL's two text encoders), holding the network's tensors: LoRA's `lora_down.weight` [r, in] (a
  convolution's [r, in, k, k]) and `lora_up.weight` [out, r], LyCORIS's LoHa (`hada_w1_a` [out, r], `hada_w1_b`
  [r, in], `hada_w2_*`) or LoKr (`lokr_w1`, `lokr_w2` or their `_a` / `_b` factors), DoRA's `dora_scale`, and
  `alpha`, a 0-d buffer (sd-scripts networks/lora.py LoRAModule registers it) that sets the scale alpha / r.
- diffusers': what a pipeline's `save_lora_weights` writes (`pytorch_lora_weights.safetensors`; trainers built on it,
  ai-toolkit's FLUX LoRAs): `<component>.<module path>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r] (peft's
  names, `lora_magnitude_vector` with DoRA), or older diffusers' `.lora.down.weight` / `.lora.up.weight` and
  `.lora_linear_layer.down.weight` / `.up.weight`, the component first (unet, transformer, text_encoder...).

`naming` says whether a checkpoint is one (every name a module's LoRA tensor, one down / A weight at least), and
`modules` groups its tensors by module. No base model is needed, and no value is read: ranks come from the shapes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

# kohya's prefix -> the pipeline component it adapts (diffusers lora_conversion_utils: unet, text_encoder, _2; SD 3's
# third text encoder as sd-scripts names it)
PARTS = (("lora_unet_", "unet"), ("lora_te_", "text_encoder"), ("lora_te1_", "text_encoder"),
         ("lora_te2_", "text_encoder_2"), ("lora_te3_", "text_encoder_3"))
# a module's tensor (after its name) -> the network it belongs to
NETWORKS = {"lora_down.weight": "LoRA", "lora_up.weight": "LoRA", "lora_mid.weight": "LoRA",
            "hada_w1_a": "LoHa", "hada_w1_b": "LoHa", "hada_w2_a": "LoHa", "hada_w2_b": "LoHa",
            "hada_t1": "LoHa", "hada_t2": "LoHa",
            "lokr_w1": "LoKr", "lokr_w1_a": "LoKr", "lokr_w1_b": "LoKr", "lokr_w2": "LoKr", "lokr_w2_a": "LoKr",
            "lokr_w2_b": "LoKr", "lokr_t2": "LoKr"}
EXTRAS = ("alpha", "dora_scale")   # beside any network's tensors
# diffusers' naming: a module's tensor (its name's tail) -> whether it is the down / A weight, whose rows are the rank
DIFFUSERS = {".lora_A.weight": True, ".lora_B.weight": False, ".lora_B.bias": False, ".lora_magnitude_vector": False,
             ".lora_embedding_A": True, ".lora_embedding_B": False, ".lora.down.weight": True, ".lora.up.weight": False,
             ".lora_linear_layer.down.weight": True, ".lora_linear_layer.up.weight": False, ".alpha": False}
COMPONENTS = ("unet", "transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "prior", "decoder")


def is_buffer(name: str) -> bool:
    """A module's `alpha`: a 0-d buffer (sd-scripts networks/lora.py LoRAModule registers it), not a trainable tensor."""
    return name.endswith(".alpha")


class Module(NamedTuple):
    part: str              # unet, text_encoder...
    network: str           # LoRA, DoRA (a LoRA with its magnitude), LoHa, LoKr
    rank: int | None       # None: a LoKr factor stored whole (no rank)
    names: tuple[str, ...]


def part_of(name: str) -> str | None:
    return next((part for prefix, part in PARTS if name.startswith(prefix)), None)


def naming(names: Iterable[str]) -> str | None:
    """"kohya" or "diffusers" when every tensor is a module's LoRA tensor under that naming and one is a network's
    down / A weight ("peft" for diffusers' names all under peft's `base_model.`: a PEFT adapter's weights without their
    adapter_config.json); else None."""
    if _kohya(names):
        return "kohya"
    if not _diffusers(names):
        return None
    return "peft" if all(n.startswith("base_model.") for n in names) else "diffusers"


def _kohya(names: Iterable[str]) -> bool:   # (each stops at the first name that is not one: a model's header is long)
    network = False
    for name in names:
        module, _, tensor = name.partition(".")
        if part_of(module) is None or not (tensor in NETWORKS or tensor in EXTRAS):
            return False
        network = network or tensor in NETWORKS
    return network


def _diffusers_split(name: str) -> tuple[str, bool] | None:
    """(module, is the down / A weight) of a name under diffusers' naming, else None."""
    tail = next((t for t in DIFFUSERS if name.endswith(t)), None)
    return None if tail is None else (name[:-len(tail)], DIFFUSERS[tail])


def _diffusers(names: Iterable[str]) -> bool:
    down = False
    for name in names:
        split = _diffusers_split(name)
        if split is None:
            return False
        down = down or split[1]
    return down


def modules(names: Iterable[str], shape: Callable[[str], tuple[int, ...]], how: str = "kohya") -> dict[str, Module]:
    """The adapted modules of a LoRA file under `how`'s naming: each one's part, network and rank (from its shapes)."""
    if how in ("diffusers", "peft"):
        return _diffusers_modules(names, shape)
    grouped: dict[str, list[str]] = {}
    for name in names:
        grouped.setdefault(name.partition(".")[0], []).append(name)
    out = {}
    for module, held in grouped.items():
        tensors = {n.partition(".")[2] for n in held}
        network = next((NETWORKS[t] for t in tensors if t in NETWORKS), "")
        rank = _rank(module, network, tensors, shape)
        shown = "DoRA" if network == "LoRA" and "dora_scale" in tensors else network
        out[module] = Module(part_of(module) or "", shown, rank, tuple(held))
    return out


def _diffusers_modules(names: Iterable[str], shape: Callable[[str], tuple[int, ...]]) -> dict[str, Module]:
    grouped: dict[str, list[str]] = {}
    ranks: dict[str, int] = {}
    for name in names:
        module, down = _diffusers_split(name) or (name, False)
        grouped.setdefault(module, []).append(name)
        if down and shape(name):   # (a 0-d "weight" of a hostile header has no rank)
            ranks[module] = shape(name)[0]
    out = {}
    for module, held in grouped.items():
        first = module.partition(".")[0]
        part = first if first in COMPONENTS else "model"
        dora = any(n.endswith(".lora_magnitude_vector") for n in held)
        out[module] = Module(part, "DoRA" if dora else "LoRA", ranks.get(module), tuple(held))
    return out


RANK_TENSOR = {"LoRA": "lora_down.weight", "LoHa": "hada_w1_b", "LoKr": "lokr_w2_b"}   # its rows are the rank


def _rank(module: str, network: str, tensors: set[str], shape: Callable[[str], tuple[int, ...]]) -> int | None:
    held = RANK_TENSOR.get(network)
    dims = shape(f"{module}.{held}") if held in tensors else ()
    return dims[0] if dims else None   # (none stored whole, or a 0-d "weight" of a hostile header)
