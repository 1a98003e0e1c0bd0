"""BEiT (transformers modeling_beit.py: BeitModel, BeitForImageClassification, BeitForMaskedImageModeling) and
Data2VecVision (modeling_data2vec_vision.py: Data2VecVisionModel, Data2VecVisionForImageClassification, model_type
data2vec-vision, under `data2vec_vision.`): ViT's patch embedding and pre-LayerNorm layers (framework/walk_vision.py)
with
- a cls token, a mask token (use_mask_token) and learned positions only with use_absolute_position_embeddings;
- a key projection without bias (q and v biased);
- relative position bias tables [(2 x side - 1)^2 + 3, heads] (side the config's image_size / patch_size), one per
  layer (use_relative_position_bias, `attention.attention.relative_position_bias`) and / or one shared by every layer
  (use_shared_relative_position_bias, `encoder.relative_position_bias`): gathered (bilinearly resized off the
  config's size: no matmul) into [heads, n, n] and added to each layer's attention scores;
- a layer scale (`lambda_1`, `lambda_2`, h each) when layer_scale_init_value > 0;
- use_mean_pooling (default): no final layernorm, the pooler a LayerNorm of the patch tokens' mean; else a final
  layernorm and the cls token as the pooled output (a pooler without parameters).
BeitModel has its pooler by default, Data2VecVisionModel not; *ForImageClassification's classifier reads the pooled
output. BeitForMaskedImageModeling (head "mim"; BeitModel without a pooler, the mask token where the config says so) runs
a LayerNorm on every token and lm_head (vocab_size) on the patch tokens. *ForSemanticSegmentation (UperNet and FCN heads
on FPN features) and BeitBackbone are not described: refused by name.

The architecture is stated once, in `walk`: the op template and the expected tensors derive from it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import vit
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked
from .framework.walk_vision import EncoderLayer, LayerPaths, encoder_layers
from .vit import Patches


@dataclass(frozen=True)
class BeitVariant(Patches):
    positions: bool      # use_absolute_position_embeddings
    layer_bias: bool     # use_relative_position_bias: a table in every layer
    shared_bias: bool    # use_shared_relative_position_bias: one table for all layers
    layer_scale: bool    # layer_scale_init_value > 0: lambda_1, lambda_2
    mean_pooling: bool   # use_mean_pooling


def pooler(model_type: str, head: str) -> bool:
    """BeitModel adds its pooler by default, Data2VecVisionModel not; the classifiers read it; the MIM head has none."""
    return head == "imgcls" or (head == "base" and model_type == "beit")


def from_config(c: Cfg) -> ArchSpec:
    h, a, img, p = vit.image_sizes(c, 16)
    v = BeitVariant(native_image_size=img, patch_size=p, channels=c.int("num_channels", default=FROM_CLASS),
                    mask_token=bool(c.get("use_mask_token", default=FROM_CLASS)),
                    positions=bool(c.get("use_absolute_position_embeddings", default=FROM_CLASS)),
                    layer_bias=bool(c.get("use_relative_position_bias", default=FROM_CLASS)),
                    shared_bias=bool(c.get("use_shared_relative_position_bias", default=FROM_CLASS)),
                    layer_scale=float(c.get("layer_scale_init_value", default=FROM_CLASS)) > 0,
                    mean_pooling=bool(c.get("use_mean_pooling", default=FROM_CLASS)))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"),
                    vocab=c.int("vocab_size", default=FROM_CLASS) if c.head == "mim" else 0,
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), pooler=pooler(c.model_type, c.head),
                    image_size=img, variant=v,
                    **c.common)


# BEiT's layers: ViT's names, lambda_1 / lambda_2 for the layer scale, the key without bias
LAYER = EncoderLayer(LayerPaths(scales=("lambda_1", "lambda_2")), k_bias=False)
LAYER_BIAS = "attention.attention.relative_position_bias.relative_position_bias_table"
SHARED_BIAS = "encoder.relative_position_bias.relative_position_bias_table"
BODY = {"beit": "beit", "data2vec-vision": "data2vec_vision"}
# the layer scale or a bias table as transformers 5's modules name them (its state_dict, a torch.save: `layers.{i}.`,
# attention.{q,k,v,o}_proj, mlp.fc1 / fc2), which save_pretrained turns back into the names above
# (conversion_mapping.py); only detection reads them: the shapes are looked up under save_pretrained's names
RUNTIME_LAYERS = r"(^|\.)layers\.\d+\.(lambda_1$|relative_position_bias\.)"


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W = WALKED
    h, ch, p, _ = infer.shape(T, pattern(W, "embeddings.patch_embeddings.projection"), "the patch embedding conv")
    lay = LAYER.paths
    q = f"{lay.attn}.{lay.q}"
    tables = [t for t in (infer.find(T, pattern(W, LAYER_BIAS, layer="0")), infer.find(T, pattern(W, SHARED_BIAS)))
              if t is not None]
    pos = infer.find(T, pattern(W, "embeddings.position_embeddings"))
    if tables:   # [(2 side - 1)^2 + 3, heads]
        side = (round((tables[0].shape[0] - 3) ** 0.5) + 1) // 2
        a, note = tables[0].shape[1], "heads from the relative position bias table"
    else:
        side = round(((pos.shape[-2] if pos is not None else 197) - 1) ** 0.5)
        a, note = infer.heads_for(h, 64)
    img = side * p
    lm = infer.find(T, r"(^|\.)lm_head\.weight$")   # the MIM head's, after a top-level layernorm of its own
    final = infer.has(T, r"(^|\.)(beit|data2vec_vision)\.layernorm\.weight$") \
        or (lm is None and infer.has(T, r"^layernorm\.weight$"))
    v = BeitVariant(native_image_size=img, patch_size=p, channels=ch,
                    mask_token=infer.has(T, pattern(W, "embeddings.mask_token")),
                    positions=pos is not None, layer_bias=infer.has(T, pattern(W, LAYER_BIAS)),
                    shared_bias=infer.has(T, pattern(W, SHARED_BIAS)), layer_scale=infer.has(T, pattern(W, lay.scales[0])),
                    mean_pooling=not final)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(W, q)), hidden=h, heads=a,
                    kv_heads=a, head_dim=h // a, intermediate=infer.shape(T, pattern(W, lay.up), "the MLP's first dense")[0],
                    vocab=lm.shape[0] if lm is not None else 0,
                    pooler=infer.has(T, pattern(W, "pooler.layernorm")), image_size=img, variant=v,
                    assumptions=(note, f"no config: image {img}x{img} from the position tables"), **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (BeitModel's, Data2VecVisionModel's and their heads'): writes its ops to B and records
    the modules it meets."""
    s = B.s
    X = s.variant_as(BeitVariant)
    h, a, L = s.hidden, s.heads, s.layers
    w = Recorder(B, "encoder")
    n = vit.patches(w) + 1
    native = X.native_image_size // X.patch_size
    tokens = (("embeddings.cls_token", (1, 1, h)),) + ((("embeddings.mask_token", (1, 1, h)),) if X.mask_token else ()) \
        + ((("embeddings.position_embeddings", (1, native ** 2 + 1, h)),) if X.positions else ())
    w.params("embeddings." + " + ".join(path.split(".")[-1] for path, _ in tokens), tokens, (B.b, n - 1, h),
             (B.b, n, h), ew=B.b * n * h * (1 + X.positions), bucket="embedding")
    table, scores = ((2 * native - 1) ** 2 + 3, a), (B.b, a, n, n)
    if X.shared_bias:   # gathered once, added to every layer's scores
        w.params("encoder.relative_position_bias (gathered, + every layer's scores)", ((SHARED_BIAS, table),),
                 (a, n, n), scores, ew=L * B.b * a * n * n)
    if X.layer_bias:
        w.params(f"{LAYER.paths.layers}[{L}].relative_position_bias (gathered, + scores)",
                 ((f"{LAYER.paths.layers}.{{bid}}.{LAYER_BIAS}", table),), (a, n, n), scores, ew=B.b * a * n * n, L=L)
    old = s.model_type == "data2vec-vision"   # Data2VecVisionLayer: EncoderLayer.kept
    lay = replace(LAYER, layer_scale=X.layer_scale, keeps_probs=not old, kept=(2 if X.layer_scale else 1) if old else 0)
    encoder_layers(w, lay, L, n, h, a, s.intermediate, s.activation, True)
    if not X.mean_pooling:
        w.norm("layernorm", (B.b, n), h, residual=False)
    if s.pooler and X.mean_pooling:   # a LayerNorm of the patch tokens' mean
        w.norm("pooler.layernorm", (B.b,), h, residual=False, note=" (mean of the patch tokens)", bucket="pooler")
    if s.head == "imgcls" and s.num_labels:
        w.linear("classifier", (B.b,), h, s.num_labels, True, bucket="cls", top=True)
    if s.head == "mim":
        w.norm("layernorm", (B.b, n), h, residual=False, bucket="cls", top=True)
        w.linear("lm_head", (B.b, n - 1), h, s.vocab, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    if s.head not in FAMILY.heads:
        return None
    X = s.variant_as(BeitVariant)
    body = "" if s.head == "base" else BODY[s.model_type]
    return walk(Builder(replace(s, image_size=X.native_image_size), 1, 1, 1, 1, 1)).shapes(body)


# the walk of a tiny BeitModel with every optional part: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "beit", pooler=True, image_size=4, variant=BeitVariant(
    native_image_size=4, patch_size=4, channels=1, mask_token=True, positions=True, layer_bias=True, shared_bias=True,
    layer_scale=True, mean_pooling=True))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=30,
              patch_size=3, num_channels=3)

FAMILY = Family(
    name="beit",
    before=("vit",),   # tried before it: its embeddings.patch_embeddings.projection names match vit's signature
    model_types=("beit", "data2vec-vision"),
    # the layer scale lambda_1 (DINOv2's is layer_scale1.lambda1) or a relative position bias table, under the names
    # save_pretrained writes or (RUNTIME_LAYERS) those of transformers 5's modules; a BEiT without them reads as a ViT
    signature=signature(WALKED, LAYER.paths.scales[0], LAYER_BIAS, SHARED_BIAS) + "|" + RUNTIME_LAYERS,
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls", "mim"),
    head_rules=(HeadRule(r"(^|\.)classifier\.weight$", "imgcls"), HeadRule(r"^lm_head\.weight$", "mim")),
    pooler=pooler,
    main_input="pixel_values",
    samples=(
        Sample("BeitConfig", dict(_SIZES, num_labels=5), ("BeitModel", "BeitForImageClassification")),
        Sample("BeitConfig", dict(_SIZES, use_mask_token=True, use_absolute_position_embeddings=True,
                                  use_relative_position_bias=True, use_shared_relative_position_bias=True,
                                  use_mean_pooling=False, layer_scale_init_value=0.0, vocab_size=50, num_labels=3),
               ("BeitModel", "BeitForImageClassification", "BeitForMaskedImageModeling")),
        Sample("Data2VecVisionConfig", dict(_SIZES, num_labels=5, use_relative_position_bias=True),
               ("Data2VecVisionModel", "Data2VecVisionForImageClassification")),
    ),
)
