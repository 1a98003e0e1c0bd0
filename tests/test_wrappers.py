"""Vision-language wrappers (families/wrappers.py): a config.json nesting its language model's config
(text_config) beside a vision tower's. Each model is a tiny transformers *ForConditionalGeneration saved by
save_pretrained; the oracles are the model object (its language model's parameters, the rest) and
FlopCounterMode on a text-only forward of the whole wrapper (no pixel_values: the vision tower does not run)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import fcm_flops, ours  # noqa: E402

from ckptstat import summarize  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.families import deepseek, hy_v4  # noqa: E402

TXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=320, max_position_embeddings=256)
VIS = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=28, patch_size=14)
MROPE = {"type": "mrope", "mrope_section": [2, 2, 4]}
# Mistral 4's text model: its family's sample (families/deepseek.py)
MISTRAL4_TEXT = next(s.kwargs for s in deepseek.FAMILY.samples if s.config == "Mistral4Config")
# HY-V4's text model: its family's sample (families/hy_v4.py: DeepSeek's sizes, the indexer, two hyper-connection copies)
HY_V4_TEXT = hy_v4.FAMILY.samples[0].kwargs
GLM_VIS = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64, patch_size=14, image_size=28)

# (model class, config class, config kwargs, the registered family of its language model)
CASES = {
    "gemma3": ("Gemma3ForConditionalGeneration", "Gemma3Config",
               dict(text_config=dict(TXT, head_dim=16, sliding_window=8), vision_config=VIS, mm_tokens_per_image=4), "gemma"),
    # Gemma 4: per-layer embeddings and a wider full-attention head in the text model; an audio tower and the two
    # embedders beside the vision tower
    "gemma4": ("Gemma4ForConditionalGeneration", "Gemma4Config",
               dict(text_config=dict(TXT, head_dim=16, global_head_dim=32, sliding_window=8, hidden_size_per_layer_input=8,
                                     vocab_size_per_layer_input=50),
                    vision_config=dict(VIS, head_dim=8),
                    audio_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, output_proj_dims=32,
                                      subsampling_conv_channels=[8, 4])), "gemma4"),
    "paligemma": ("PaliGemmaForConditionalGeneration", "PaliGemmaConfig",
                  dict(text_config=dict(TXT, model_type="gemma", head_dim=16),
                       vision_config=dict(VIS, model_type="siglip_vision_model"), projection_dim=64), "gemma"),
    "llava": ("LlavaForConditionalGeneration", "LlavaConfig",
              dict(text_config=dict(TXT, model_type="llama"), vision_config=dict(VIS, model_type="clip_vision_model"),
                   image_seq_length=4), "llama"),
    "llava-untied-qwen2": ("LlavaOnevisionForConditionalGeneration", "LlavaOnevisionConfig",
                           dict(text_config=dict(TXT, model_type="qwen2"),
                                vision_config=dict(VIS, model_type="siglip_vision_model")), "llama"),
    "mistral3": ("Mistral3ForConditionalGeneration", "Mistral3Config",
                 dict(text_config=dict(TXT, model_type="mistral", head_dim=16),
                      vision_config=dict(VIS, model_type="pixtral", head_dim=8)), "llama"),
    # Mistral 3's wrapper over a Mistral 4 language model (DeepSeek-V3's latent attention and MoE), as
    # transformers maps model_type mistral4 to Mistral3ForConditionalGeneration for image-text-to-text
    "mistral3-mistral4": ("Mistral3ForConditionalGeneration", "Mistral3Config",
                          dict(text_config=dict(MISTRAL4_TEXT, model_type="mistral4"),
                               vision_config=dict(VIS, model_type="pixtral", head_dim=8)), "deepseek"),
    "idefics3": ("Idefics3ForConditionalGeneration", "Idefics3Config",
                 dict(text_config=dict(TXT, model_type="llama"), vision_config=dict(VIS, image_size=56), scale_factor=2),
                 "llama"),
    "smolvlm": ("SmolVLMForConditionalGeneration", "SmolVLMConfig",
                dict(text_config=dict(TXT, model_type="llama"), vision_config=dict(VIS, image_size=56), scale_factor=2),
                "llama"),
    "internvl": ("InternVLForConditionalGeneration", "InternVLConfig",
                 dict(text_config=dict(TXT, model_type="qwen2"),
                      vision_config=dict(VIS, image_size=[28, 28], patch_size=[14, 14])), "llama"),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3VLConfig",
                 dict(text_config=dict(TXT, head_dim=16, rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3],
                                                                       "mrope_interleaved": True}),
                      vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64,
                                         deepstack_visual_indexes=[0])), "qwen3"),
    # Qwen3-VL-MoE: Qwen3-MoE's layers (routed experts fused [experts, out, in] as transformers 5.25 saves them, a
    # dense MLP where mlp_only_layers says) under Qwen3-VL's M-RoPE
    "qwen3_vl_moe": ("Qwen3VLMoeForConditionalGeneration", "Qwen3VLMoeConfig",
                     dict(text_config=dict(TXT, head_dim=16, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                                           mlp_only_layers=[1], rope_scaling={"rope_type": "default",
                                                                              "mrope_section": [2, 3, 3],
                                                                              "mrope_interleaved": True}),
                          vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64,
                                             deepstack_visual_indexes=[0])), "qwen_moe"),
    # GLM-4.1V (and GLM-4.6V and GLM-GA, the same text model): GLM-4 whose heads are hidden / heads wide and biased whatever the
    # config says; GLM-4.5V: GLM-4.5 MoE (a dense first layer, a shared expert); both rotate 3 position rows
    "glm4v": ("Glm4vForConditionalGeneration", "Glm4vConfig",
              dict(text_config=dict(TXT, rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3]}),
                   vision_config=GLM_VIS), "glm"),
    "glm46v": ("Glm46VForConditionalGeneration", "Glm46VConfig",
               dict(text_config=dict(TXT, rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3]}),
                    vision_config=GLM_VIS), "glm"),
    "glmga": ("Glm46VForConditionalGeneration", "GlmgaConfig",   # (transformers' image-text-to-text class for glmga)
              dict(text_config=dict(TXT, rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3]}),
                   vision_config=GLM_VIS), "glm"),
    "glm4v_moe": ("Glm4vMoeForConditionalGeneration", "Glm4vMoeConfig",
                  dict(text_config=dict(TXT, moe_intermediate_size=24, n_routed_experts=4, num_experts_per_tok=2,
                                        n_shared_experts=1, first_k_dense_replace=1,
                                        rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2],
                                                         "partial_rotary_factor": 0.5}),
                       vision_config=GLM_VIS), "glm4_moe"),
    # PaddleOCR-VL: ERNIE 4.5's layers under M-RoPE; its projector saved as `mlp_AR` (transformers' `projector`)
    "paddleocr_vl": ("PaddleOCRVLForConditionalGeneration", "PaddleOCRVLConfig",
                     dict(text_config=dict(TXT, head_dim=16, rope_parameters={"rope_type": "default",
                                                                              "mrope_section": [2, 3, 3]}),
                          vision_config=VIS), "ernie4_5"),
    # HunYuan-VL: HunYuan dense V1's layers (q/k norms after the rotary) under a 4-row M-RoPE; its tower saved as `vit`
    "hunyuan_vl": ("HunYuanVLForConditionalGeneration", "HunYuanVLConfig",
                   dict(text_config=dict(TXT, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                            "mrope_section": [2, 2, 2, 2]}),
                        vision_config=dict(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                           num_key_value_heads=4, num_hidden_layers=2, out_hidden_size=64,
                                           text_hidden_size=64, patch_size=14)), "hunyuan_v1_dense"),
    # HY-V4-VL: HY-V4's language model (DeepSeek-V3.2's latent attention and indexer, hyper-connections, sinks) with
    # Qwen3-VL's rotary over the rope part (mrope_section summing to qk_rope_head_dim / 2); its tower saved as `vit`
    "hy_v4_vl": ("HYV4VLForConditionalGeneration", "HYV4VLConfig",
                 dict(text_config=dict(HY_V4_TEXT, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                    "mrope_section": [1, 0, 1]}),
                      vision_config=dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=4,
                                         num_hidden_layers=2, out_hidden_size=32, text_hidden_size=32, patch_size=14)),
                 "hy_v4"),
    # Qwen3-Omni's thinker: Qwen3-VL-MoE's text model beside a vision and an audio tower (vision_start_token_id, which
    # its rope index reads and 5.25's thinker config does not define, given as its release's configs give it)
    "qwen3_omni_moe_thinker": ("Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3OmniMoeThinkerConfig",
                               dict(text_config=dict(TXT, head_dim=16, moe_intermediate_size=24, num_experts=4,
                                                     num_experts_per_tok=2,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                      "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
                                    vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4,
                                                       out_hidden_size=64, deepstack_visual_indexes=[0]),
                                    audio_config=dict(d_model=32, encoder_layers=1, encoder_attention_heads=4,
                                                      encoder_ffn_dim=48, output_dim=64, num_mel_bins=16,
                                                      downsample_hidden_size=8),
                                    vision_start_token_id=300), "qwen_moe"),
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", "Qwen2VLConfig",
                 dict(text_config=dict(TXT, rope_scaling=MROPE),
                      vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, patch_size=14)), "llama"),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig",
                   dict(text_config=dict(TXT, rope_scaling=MROPE, tie_word_embeddings=True),
                        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4, out_hidden_size=64,
                                           fullatt_block_indexes=[1])), "llama"),
}


def _model(case: str):
    cls, cfg_cls, kwargs, _ = CASES[case]
    if not hasattr(T, cls):
        pytest.skip(f"transformers {T.__version__} has no {cls}")
    torch.manual_seed(0)
    return getattr(T, cls)._from_config(getattr(T, cfg_cls)(**kwargs), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (model, its save_pretrained folder), built once."""
    root = tmp_path_factory.mktemp("wrappers")
    out = {}
    for case in CASES:
        model = _model(case)
        model.save_pretrained(root / case)
        out[case] = (model, str(root / case))
    return out


def _language_params(model) -> int:
    """The language model's parameters, the LM head included unless tied to its embeddings (or the language model's
    own: Nemotron-H Omni holds a NemotronHForCausalLM beside its tower)."""
    outer = getattr(model, "model", model)
    lm = next(getattr(outer, a) for a in ("language_model", "text_model") if hasattr(outer, a))
    head = (model.get_output_embeddings() or lm.get_output_embeddings()).weight
    own = sum(p.numel() for p in lm.parameters())
    return own + (0 if any(head is p for p in lm.parameters()) else head.numel())


@pytest.mark.parametrize("case", CASES)
def test_language_model_is_the_analytic_model(saved, case):
    model, folder = saved[case]
    m = load(folder)
    total = sum(p.numel() for p in model.parameters())
    assert m.spec.family == CASES[case][3] and m.spec.head == "lm"
    assert m.predicted["total"] == _language_params(model)
    assert m.checkpoint_params == total and m.outside_params == total - _language_params(model) > 0 and m.agree
    assert any("vision-language" in a for a in m.spec.assumptions)
    assert any("outside the analytic model" in n for n in m.notes)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seq,batch", [(8, 1), (16, 2)])
def test_text_flops_equal_flop_counter(saved, case, seq, batch):
    model, folder = saved[case]
    assert ours(load(folder).spec, seq, batch) == fcm_flops(model, seq, batch, device="cpu")


@pytest.mark.parametrize("case", ["gemma3", "qwen2_5_vl"])
def test_bare_config_and_commands(saved, case, cli, tmp_path):
    model, folder = saved[case]
    m = load(os.path.join(folder, "config.json"))   # no weights: the language model's prediction alone
    assert m.predicted["total"] == _language_params(model) and m.checkpoint_params is None
    r = summarize(folder)
    assert r["architecture"]["family"] == CASES[case][3] and r["architecture"]["model_type"] == case
    code, out, _ = cli("flops", folder, "--json")
    assert code == 0
    p = json.loads(out)["parameters"]
    assert p["agree"] and p["outside"] == sum(t.numel() for t in model.parameters()) - _language_params(model)
    code, out, _ = cli("memory", folder, "--json")
    assert code == 0 and json.loads(out)["parameters"]["outside"] == p["outside"]
    code, out, _ = cli("summary", folder)   # the split said: the language model predicted, the towers counted
    assert code == 0 and f"{_language_params(model):,} parameters the config predicts" in " ".join(out.split())
    text = " ".join(out.split())
    assert f"+ {p['outside']:,} outside it" in text
    # the modules outside, as transformers' wrapper holds them (their first name component under model.)
    held = sorted({n.split(".")[1] for n, _ in model.named_parameters() if not n.startswith(("lm_head", "model.language_model"))})
    assert f"outside it ({', '.join(held)})" in text


def test_dual_encoders_are_no_wrapper(tmp_path):
    """CLIP and SigLIP nest a text and a vision config too, but no decoder: each is its own family (or, unregistered,
    gets no analytic model), never a wrapper analysed as its text tower."""
    from ckptstat.errors import UsageError
    from ckptstat.families import MODEL_TYPES, language_model
    from ckptstat.families.framework.spec import from_config
    text = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)
    for cfg in (T.CLIPConfig(text_config=text, vision_config=VIS).to_dict(),
                T.SiglipConfig(text_config=text, vision_config=VIS).to_dict()):
        assert language_model(cfg) is None
        if cfg["model_type"] in MODEL_TYPES:
            spec = from_config(cfg)
            assert spec.family == MODEL_TYPES[cfg["model_type"]] and not spec.outside
        else:
            with pytest.raises(UsageError, match="no analytic model"):
                from_config(cfg)


def test_qwen3_vl_moe_in_the_release_layout(saved, tmp_path):
    """Qwen's own Qwen3-VL-MoE releases keep the fused experts [experts, in, out] (gate_up_proj [E, hidden, 2 x moe],
    down_proj [E, moe, hidden]), which transformers 5.25 transposes as it loads (conversion_mapping's Transpose for
    qwen3_vl_moe): the save rewritten so loads into the same model (the oracle), and reads as the save does."""
    from safetensors.torch import load_file, save_file
    model, folder = saved["qwen3_vl_moe"]
    release = tmp_path / "release"
    shutil.copytree(folder, release)
    state = load_file(str(release / "model.safetensors"))
    experts = [k for k in state if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]
    assert len(experts) == 2   # the one MoE layer (mlp_only_layers=[1])
    for k in experts:
        state[k] = state[k].transpose(1, 2).contiguous()
    save_file(state, str(release / "model.safetensors"), metadata={"format": "pt"})
    loaded = getattr(T, CASES["qwen3_vl_moe"][0]).from_pretrained(str(release)).state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    a, b = load(folder), load(str(release))
    assert b.agree and (b.predicted, b.outside_params, b.checkpoint_params) == (a.predicted, a.outside_params,
                                                                                a.checkpoint_params)
    assert ours(b.spec, 8, 1) == fcm_flops(model, 8, 1, device="cpu")


# Qwen3-VL-30B-A3B-Instruct's config.json as Qwen released it (written by transformers 4.57: `num_experts`, and
# `rope_scaling`, which 5.x reads as rope_parameters)
QWEN3_VL_30B_A3B = {
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe", "image_token_id": 151655,
    "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "tie_word_embeddings": False, "dtype": "bfloat16",
    "text_config": {
        "model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
        "max_position_embeddings": 262144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-06,
        "rope_theta": 5000000, "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                                "rope_type": "default"},
        "hidden_act": "silu", "attention_bias": False, "dtype": "bfloat16"},
    "vision_config": {
        "model_type": "qwen3_vl_moe", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
        "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "in_channels": 3, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
        "hidden_act": "gelu_pytorch_tanh"},
}


def test_qwen3_vl_moe_at_its_published_size(tmp_path):
    """The release's config.json alone: the language model's parameters and its active ones per token (the
    experts' share k / E) are those of the model transformers builds from it on the meta device."""
    cfg = {k: v for k, v in QWEN3_VL_30B_A3B.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = T.Qwen3VLMoeForConditionalGeneration(T.Qwen3VLMoeConfig(**cfg))
    assert model.config.text_config.num_experts == 128
    language = _language_params(model)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".language_model." in n and ".mlp.experts." in n)
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_VL_30B_A3B))
    m = load(str(tmp_path / "config.json"))
    assert m.spec.family == "qwen_moe" and m.spec.experts == 128 and m.spec.top_k == 8
    assert m.predicted["total"] == language and m.predicted["active"] == language - experts + experts * 8 // 128


@pytest.mark.parametrize("case", CASES)
def test_counts_and_ties_of_both_saves(saved, case, tmp_path):
    """save_pretrained (tied LM head dropped) and torch.save (tied names share storage): the unique count and
    the tie groups are the model object's."""
    from census_audit import model_oracle, reported, save_both, saved_names
    model, _ = saved[case]
    oracle = model_oracle(model)
    for variant, path in save_both(model, str(tmp_path)).items():
        # save_pretrained writes a VLM's names in the layout before transformers 4.52 (`language_model.model.`)
        want = saved_names(model, oracle) if variant == "save_pretrained" else oracle
        got = reported(path)
        assert (got["params"], got["ties"]) == (oracle["params"], want["ties"]), variant


@pytest.mark.parametrize("archs", [5, "LlamaForCausalLM", {"a": 1}, [3, None], None])
@pytest.mark.parametrize("wrapped", [False, True])
def test_odd_architectures_values_are_ignored(cli, tmp_path, archs, wrapped):
    """`architectures` that is no list of strings (hand-edited configs) names no class: the family default head,
    never an internal error; an odd model_type of a text config is no wrapper."""
    text = dict(model_type="llama", hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                vocab_size=10)
    cfg = dict(model_type="gemma3", text_config=text, vision_config={"model_type": 3}) if wrapped else text
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, architectures=archs)))
    code, out, err = cli("flops", str(tmp_path / "config.json"), "--json")
    assert code == 0 and not err and json.loads(out)["architecture"]["family"] == "llama"
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, text_config=dict(text, model_type=[1]))))
    code, _, err = cli("flops", str(tmp_path / "config.json"))
    assert code == (2 if wrapped else 0) and "internal error" not in err


# More wrappers, each from its config class's defaults shrunk by tests/census_audit.py's tiny_config (the same
# shrinking the wide audit uses): every parameter outside the language model is counted apart, and the text FLOPs
# are FlopCounterMode's.
MORE = [("deepseek_vl", "DeepseekVLForConditionalGeneration"), ("deepseek_vl_hybrid", "DeepseekVLHybridForConditionalGeneration"),
        ("ovis2", "Ovis2ForConditionalGeneration"), ("got_ocr2", "GotOcr2ForConditionalGeneration"),
        ("idefics2", "Idefics2ForConditionalGeneration"), ("llava_next", "LlavaNextForConditionalGeneration"),
        ("llava_next_video", "LlavaNextVideoForConditionalGeneration"), ("vipllava", "VipLlavaForConditionalGeneration"),
        ("video_llava", "VideoLlavaForConditionalGeneration"),
        # transformers 5.25's: Ovis 2.5 (its visual_tokenizer and visual vocabulary `vte`), LLaVA-OneVision 1.5
        ("ovis2_5", "Ovis2_5ForConditionalGeneration"), ("llava_onevision1_5", "LlavaOnevision15ForConditionalGeneration"),
        # an audio tower (wrappers.AUDIO)
        ("moss_transcribe_diarize", "MossTranscribeDiarizeForConditionalGeneration"),
        ("voxtral", "VoxtralForConditionalGeneration"), ("qwen2_audio", "Qwen2AudioForConditionalGeneration"),
        ("audioflamingo3", "AudioFlamingo3ForConditionalGeneration"),
        ("musicflamingo", "MusicFlamingoForConditionalGeneration"), ("glmasr", "GlmAsrForConditionalGeneration")]


@pytest.mark.parametrize("model_type,cls", MORE, ids=[m for m, _ in MORE])
def test_more_wrappers_from_shrunk_configs(model_type, cls):
    from census_audit import tiny_config
    from test_families import tensor_infos
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from ckptstat.census.model import from_checkpoint
    from ckptstat.core import Checkpoint
    if not hasattr(T, cls) or model_type not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {T.__version__} has no {cls}")
    cfg = tiny_config(getattr(T, CONFIG_MAPPING_NAMES[model_type]))
    torch.manual_seed(0)
    model = getattr(T, cls)._from_config(cfg, attn_implementation="eager").eval()
    config = dict(cfg.to_dict(), architectures=[cls])
    m = from_checkpoint(Checkpoint(path="x", format="safetensors", tensors=tensor_infos(model), files=("x",), config=config))
    total = sum(p.numel() for p in model.parameters())
    assert m.predicted["total"] == _language_params(model) and m.outside_params == total - _language_params(model)
    assert m.agree and ours(m.spec, 16, 1) == fcm_flops(model, 16, 1, device="cpu")


# Wrappers whose save_pretrained writes other names than their modules' (transformers' conversion mappings, reverted
# on save, keep their releases' names): HyperCLOVAX-Vision's vision_projector, LightOnOCR's vision_encoder and
# vision_projection, MiniMax-M3-VL's patch_merge_mlp, MiniCPM-V's merger beside its tower, Qianfan-OCR's and
# Nemotron-H Omni's InternVL-format mlp1, Cosmos3-Omni's Qwen3-VL tower flat beside the language model (blocks.*,
# merger.*, ...), Granite 4 Vision's Q-Former projectors (its Granite language model, and Granite-Docling's, through the
# generic template),
# Janus's image generation modules (its VQ-GAN, generation embeddings, aligner and head), Inkling's audio tower saved as
# model.audio;
# and wrappers whose text model rotates by M-RoPE (Qwen2-VL, GLM-4.1V, PaddleOCR-VL, Qwen2.5-Omni's thinker: Qwen2 beside
# an audio tower) or is hybrid (Qwen3.5).
SAVED_AS_RELEASED = [("hyperclovax_vision_v2", "HyperCLOVAXVisionV2ForConditionalGeneration"),
                     ("lighton_ocr", "LightOnOcrForConditionalGeneration"),
                     ("minimax_m3_vl", "MiniMaxM3SparseForConditionalGeneration"),
                     ("minicpmv4_6", "MiniCPMV4_6ForConditionalGeneration"),
                     ("qianfan_ocr", "QianfanOCRForConditionalGeneration"),
                     ("nemotron_h_omni", "NemotronH_Omni_Reasoning_V3"),
                     ("cosmos3_omni", "Cosmos3OmniForConditionalGeneration"),
                     ("granite4_vision", "Granite4VisionForConditionalGeneration"),
                     ("janus", "JanusForConditionalGeneration"),
                     ("granite_docling", "GraniteDoclingForConditionalGeneration"),
                     ("inkling_mm_model", "InklingForConditionalGeneration"),   # (needs scipy, which the lock leaves out)
                     ("qwen2_vl", "Qwen2VLForConditionalGeneration"), ("glm4v", "Glm4vForConditionalGeneration"),
                     ("paddleocr_vl", "PaddleOCRVLForConditionalGeneration"),
                     ("qwen3_5", "Qwen3_5ForConditionalGeneration"),
                     ("qwen2_5_omni_thinker", "Qwen2_5OmniThinkerForConditionalGeneration")]


@pytest.mark.parametrize("model_type,cls", SAVED_AS_RELEASED, ids=[m for m, _ in SAVED_AS_RELEASED])
def test_wrappers_as_save_pretrained_writes_them(model_type, cls, tmp_path):
    """The folder save_pretrained writes: every parameter outside the language model (by transformers' own module
    tree) counted apart under the names the file holds, the rest predicted by the text model's template, agreeing;
    and the text FLOPs FlopCounterMode's."""
    from census_audit import tiny_config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    if not hasattr(T, cls) or model_type not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {T.__version__} has no {cls}")
    cfg = tiny_config(getattr(T, CONFIG_MAPPING_NAMES[model_type]))
    torch.manual_seed(0)
    try:
        model = getattr(T, cls)._from_config(cfg, attn_implementation="eager").eval()
    except ModuleNotFoundError as e:
        pytest.skip(f"transformers builds {cls} with {e.name}, which is not installed")
    model.save_pretrained(tmp_path)
    m = load(str(tmp_path))
    total, language = model.num_parameters(), _language_params(model)
    assert (m.checkpoint_params, m.predicted["total"], m.outside_params) == (total, language, total - language)
    assert m.agree and ours(m.spec, 16, 1) == fcm_flops(model, 16, 1, device="cpu")


def test_gemma3n_runs_its_multimodal_embedders_on_text():
    """Gemma 3n's text forward also projects every token through embed_vision and embed_audio (Gemma3nModel.forward looks
    each id up in both, a dummy id where it is not theirs): the wrapper's FLOPs are Gemma3nForCausalLM's plus those two
    embedders' over the same tokens (transformers' own modules, run as the forward runs them; with timm installed, the
    whole wrapper's forward), their weights counted outside. The coverage walk's oracle needs timm for the vision tower
    (docs/coverage.md: no oracle without it)."""
    import importlib.util

    from census_audit import tiny_config
    from transformers.models.gemma3n import modeling_gemma3n as g3n

    from ckptstat.analysis.meta import flop_counter
    from ckptstat.families.framework.spec import from_config
    cfg = tiny_config(T.Gemma3nConfig)
    config = dict(cfg.to_dict(), architectures=["Gemma3nForConditionalGeneration"])
    spec = from_config(config)
    seq, text = 16, cfg.text_config
    torch.manual_seed(0)
    if importlib.util.find_spec("timm") is not None:
        want = fcm_flops(T.Gemma3nForConditionalGeneration._from_config(cfg, attn_implementation="eager").eval(), seq, 1,
                         device="cpu")
    else:
        want = fcm_flops(T.Gemma3nForCausalLM._from_config(text, attn_implementation="eager").eval(), seq, 1, device="cpu")
        for sub in (cfg.vision_config, cfg.audio_config):
            embedder = g3n.Gemma3nMultimodalEmbedder(sub, text).requires_grad_(False)
            with flop_counter() as counter, torch.no_grad():
                embedder(input_ids=torch.full((1, seq), sub.vocab_offset + sub.vocab_size - 1))
            want += counter.get_total_flops()
    assert dict(spec.variant.embedders) == {"embed_vision": cfg.vision_config.hidden_size,
                                            "embed_audio": cfg.audio_config.hidden_size}
    assert ours(spec, seq, 1) == want


def test_phi4_multimodal_is_its_phi3_text_path():
    """Phi-4-multimodal's config.json is its language model's own (wrappers.FLAT): the Phi-3 decoder, its image and
    audio towers (model.embed_tokens_extend) counted from the checkpoint; a text-only forward runs the decoder alone."""
    from census_audit import tiny_config
    from test_families import tensor_infos

    from ckptstat.census.model import from_checkpoint
    from ckptstat.core import Checkpoint
    if not hasattr(T, "Phi4MultimodalForCausalLM"):
        pytest.skip(f"transformers {T.__version__} has no Phi4MultimodalForCausalLM")
    cfg = tiny_config(T.Phi4MultimodalConfig)
    torch.manual_seed(0)
    model = T.Phi4MultimodalForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    config = dict(cfg.to_dict(), architectures=["Phi4MultimodalForCausalLM"])
    m = from_checkpoint(Checkpoint(path="x", format="safetensors", tensors=tensor_infos(model), files=("x",), config=config))
    total = sum(p.numel() for p in model.parameters())
    towers = sum(p.numel() for p in model.model.embed_tokens_extend.parameters())
    assert m.spec.family == "phi3" and m.spec.head == "lm"
    assert m.predicted["total"] == total - towers and m.outside_params == towers > 0 and m.agree
    assert ours(m.spec, 16, 1) == fcm_flops(model, 16, 1, device="cpu")
    assert any("its own keys" in a for a in m.spec.assumptions)


@pytest.mark.parametrize("model_type,cls", [("blip-2", "Blip2ForConditionalGeneration"),
                                            ("instructblip", "InstructBlipForConditionalGeneration")])
def test_blip2_is_its_opt_language_model(model_type, cls):
    """BLIP-2 and InstructBLIP: an OPT language model behind a Q-Former; their forward needs pixel_values, so
    the text FLOPs' oracle is the language model's own forward (an OPTForCausalLM, LM head included)."""
    from census_audit import tiny_config
    from test_families import tensor_infos
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from ckptstat.census.model import from_checkpoint
    from ckptstat.core import Checkpoint
    if not hasattr(T, cls) or model_type not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {T.__version__} has no {cls}")
    cfg = tiny_config(getattr(T, CONFIG_MAPPING_NAMES[model_type]))
    torch.manual_seed(0)
    model = getattr(T, cls)._from_config(cfg, attn_implementation="eager").eval()
    m = from_checkpoint(Checkpoint(path="x", format="safetensors", tensors=tensor_infos(model), files=("x",),
                                   config=dict(cfg.to_dict(), architectures=[cls])))
    lm = model.language_model
    own = sum(p.numel() for p in lm.parameters())
    assert m.spec.family == "opt" and m.predicted["total"] == own and m.agree
    assert m.outside_params == sum(p.numel() for p in model.parameters()) - own
    assert ours(m.spec, 16, 1) == fcm_flops(lm, 16, 1, device="cpu")


@pytest.mark.parametrize("model_type,cls", [("llava", "LlavaForConditionalGeneration"),
                                            ("paligemma", "PaliGemmaForConditionalGeneration"),
                                            ("video_llava", "VideoLlavaForConditionalGeneration")])
def test_a_wrappers_bare_vision_tower_does_not_name_the_file(model_type, cls):
    """transformers 5 writes a wrapper's CLIP or SigLIP tower without its `vision_model.` (`vision_tower.embeddings...`):
    with no config.json the names are found as those of the language model alone, not as a one-tower CLIP or SigLIP
    file (whose bare names start at the root, families/clip.py)."""
    from census_audit import tiny_config
    from test_families import tensor_infos
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from ckptstat.families import detect
    from ckptstat.families.wrappers import VISION_MODULES, is_outside
    with torch.device("meta"):
        model = getattr(T, cls)._from_config(tiny_config(getattr(T, CONFIG_MAPPING_NAMES[model_type])))
    names = tensor_infos(model)
    assert any(".embeddings.patch_embedding." in n for n in names)
    assert detect(names, None).family == detect([n for n in names if not is_outside(n, VISION_MODULES)], None).family


def test_a_flat_wrappers_missing_keys_are_its_own_config_class_defaults():
    """A Phi-4-multimodal config.json that leaves its sizes out: Phi4MultimodalConfig's defaults (wrappers.flat), not
    Phi3Config's (another vocabulary, max positions, kv heads)."""
    from ckptstat.families.framework.spec import from_config
    if not hasattr(T, "Phi4MultimodalConfig"):
        pytest.skip(f"transformers {T.__version__} has no Phi4MultimodalConfig")
    spec = from_config({"model_type": "phi4_multimodal", "architectures": ["Phi4MultimodalForCausalLM"]})
    want = T.Phi4MultimodalConfig()
    assert spec.family == "phi3"
    assert (spec.vocab, spec.hidden, spec.layers, spec.heads, spec.kv_heads, spec.intermediate) == (
        want.vocab_size, want.hidden_size, want.num_hidden_layers, want.num_attention_heads, want.num_key_value_heads,
        want.intermediate_size)
