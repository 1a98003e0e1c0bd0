"""DBRX (transformers modeling_dbrx.py, configuration_dbrx.py): a LLaMA-shaped decoder (layout.py) under its own names
(transformer.wte, blocks.N.norm_attn_norm.{norm_1, attn, norm_2}, ffn, transformer.norm_f), its norms LayerNorms without
bias, its attention one fused Wqkv (q of d_model, k and v of attn_config.kv_n_heads heads of d_model / n_heads, clamped
to +-clip_qkv, element-wise) and out_proj, all unbiased. Its MLP is a router (ffn.router.layer, a softmax, the top
ffn_config.moe_top_k, normalised by their p-norm) over ffn_config.moe_num_experts gated experts of ffn_hidden_size held
as three flat parameters per layer, ffn.experts.mlp.w1, v1, w2, each [E x f, h] (DecoderLayout.flat_experts).

FLOPs are DbrxExperts' eager loop (it has no grouped_mm path): each hit expert runs x w1^T, x v1^T and (act(gate) x up)
w2 over the tokens routed to it, b x s x k rows in all (layout_moe.routed). Total parameters count every expert; active
ones each token's top-k. The sizes sit in the nested attn_config and ffn_config (their class defaults: the rows
"dbrx.attn_config" and "dbrx.ffn_config" of config_defaults.json). DBRX never ties its LM head (the config refuses
tie_word_embeddings)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths

# llama.cpp's dbrx names norm_2 attn_output_norm (gguf-py MODEL_TENSORS[DBRX]: ATTN_OUT_NORM, no FFN_NORM)
DBRX = DecoderLayout(norm="layernorm_nobias", fused_qkv=True, mlp="routed", flat_experts=True, qkv_bias=False,
                     o_bias=False, mlp_bias=False, gguf_renames=(("ffn_norm", "attn_output_norm"),),
                     paths=Paths(body="transformer", embed="wte", layers="blocks", attn="norm_attn_norm.attn", qkv="Wqkv",
                                 o="out_proj", attn_in="norm_attn_norm.norm_1", mlp_in="norm_attn_norm.norm_2", mlp="ffn",
                                 router="router.layer", experts="experts.mlp", gate="w1", up="v1", down="w2",
                                 norm="norm_f"))
_FFN, _ATTN = "dbrx.ffn_config", "dbrx.attn_config"


def from_config(c: Cfg) -> ArchSpec:
    attn, ffn = c.sub("attn_config", _ATTN), c.sub("ffn_config", _FFN)
    spec = layout.spec_from_config(DBRX, c)
    act = ffn.get("ffn_act_fn", default=None) or {"name": "silu"}   # DbrxFFNConfig.__post_init__'s default
    if not isinstance(act, dict) or not isinstance(act.get("name", "silu"), str):
        raise UsageError(f"{c.path}: config ffn_config.ffn_act_fn is not an object naming an activation")
    return replace(spec, kv_heads=attn.int("kv_n_heads", default=FROM_CLASS), intermediate=ffn.int("ffn_hidden_size",
                   default=FROM_CLASS), experts=ffn.int("moe_num_experts", default=FROM_CLASS),
                   top_k=ffn.int("moe_top_k", default=FROM_CLASS), activation=act.get("name", "silu"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths from the shapes: the router's rows are the experts, w1's rows E x f; head_dim assumed (128 or 64 where
    it divides both widths), top-k DbrxFFNConfig's default."""
    V, h = walk_names.layout_shape(T, DBRX, "token_embd")
    E = walk_names.layout_shape(T, DBRX, "ffn_gate_inp")[0]
    w1 = walk_names.layout_shape(T, DBRX, "ffn_gate_exps", "")
    qkv = walk_names.layout_shape(T, DBRX, "attn_qkv")[0]
    if E == 0 or w1[0] % E or (qkv - h) % 2:
        raise UsageError(f"cannot infer the architecture from tensor names: ffn.experts.mlp.w1 {list(w1)} and Wqkv "
                         f"[{qkv}, {h}] are not DBRX's [{E} x ffn_hidden_size, {h}] and [{h} + 2 x kv width, {h}]; "
                         "pass --config")
    kv = (qkv - h) // 2
    d = 128 if h % 128 == 0 and kv % 128 == 0 else 64 if h % 64 == 0 and kv % 64 == 0 else kv
    k = int(class_default(_FFN, "moe_top_k"))
    notes = (f"no config: head_dim assumed {d} (KV-cache bytes use the Wqkv width, which is exact)",
             f"no config: experts per token (top-k) assumed {k}, DbrxFFNConfig's default")
    return ArchSpec(layers=infer.count_layers(T, DBRX.paths.numbered()), hidden=h, heads=h // d, kv_heads=kv // d,
                    head_dim=d, vocab=V, intermediate=w1[0] // E, gated_mlp=True, norm="layernorm", activation="silu",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=False, experts=E, top_k=k, assumptions=notes, **common)


FAMILY = Family(
    name="dbrx",
    **{**layout.family_fields({"dbrx": DBRX}, "ffn_gate_inp"), "from_config": from_config, "from_tensors": from_tensors},
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("DbrxConfig", dict(d_model=32, n_heads=4, n_layers=2, vocab_size=99, max_seq_len=64,
                                  attn_config=dict(kv_n_heads=2, clip_qkv=8, rope_theta=10000.0),
                                  ffn_config=dict(ffn_hidden_size=48, moe_num_experts=4, moe_top_k=2)),
               ("DbrxModel", "DbrxForCausalLM"), device="cpu"),
    ),
)
