"""Buckets of what transformers saves, for families whose embeddings, final norms or heads no bucket rule placed
(naming/ BUCKET_RULES; README "Counting conventions"): every parameter of these saves in a bucket, none `other`, and
each named tensor in the bucket its role in the model gives it (the embedding table's, the final norm after the last
layer's, the LM or task head's). Before, GPT-NeoX's (Pythia's) `embed_in` and `embed_out`, BLOOM's
`word_embeddings_layernorm`, ModernBERT's `final_norm`, `head` and `decoder`, XLM-RoBERTa-XL's `encoder.LayerNorm`,
ESM's `emb_layer_norm_after`, LFM2's `embedding_norm` (its final norm, modeling_lfm2.py), XLNet's
`word_embedding`, BART's `classification_head`, FSMT's `output_projection`, ProphetNet's decoder embeddings and
PEGASUS-X's `embed_global` were `other`; so were wav2vec2's (HuBERT's, WavLM's, Data2VecAudio's) conv feature encoder,
feature projection and conv position embedding, SigLIP's text head and logit bias, CLAP's audio projection and scales.

Each model is built tiny from its config class (census_audit.tiny_config) and saved by `save_pretrained`.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import tiny_config  # noqa: E402

from ckptstat import open_checkpoint, summarize  # noqa: E402
from ckptstat.census import placements  # noqa: E402

# (config class, model class, {a saved name: its bucket})
CASES = [
    ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"gpt_neox.embed_in.weight": "embedding", "embed_out.weight": "cls",
                                             "gpt_neox.final_layer_norm.weight": "encoder"}),
    ("BloomConfig", "BloomForCausalLM", {"transformer.word_embeddings_layernorm.weight": "embedding",
                                         "transformer.word_embeddings.weight": "embedding"}),
    ("ModernBertConfig", "ModernBertForMaskedLM", {"model.final_norm.weight": "encoder", "head.dense.weight": "cls",
                                                   "decoder.bias": "cls"}),
    ("ModernBertConfig", "ModernBertForTokenClassification", {"head.dense.weight": "cls", "classifier.weight": "cls"}),
    ("XLMRobertaXLConfig", "XLMRobertaXLForMaskedLM", {"roberta.encoder.LayerNorm.weight": "encoder"}),
    ("EsmConfig", "EsmForMaskedLM", {"esm.encoder.emb_layer_norm_after.weight": "encoder"}),
    ("Lfm2Config", "Lfm2ForCausalLM", {"model.embedding_norm.weight": "encoder"}),
    ("XLNetConfig", "XLNetLMHeadModel", {"transformer.word_embedding.weight": "embedding", "transformer.mask_emb": "embedding"}),
    ("BartConfig", "BartForSequenceClassification", {"classification_head.out_proj.weight": "cls"}),
    ("FSMTConfig", "FSMTForConditionalGeneration", {"model.decoder.output_projection.weight": "cls"}),
    ("ProphetNetConfig", "ProphetNetForConditionalGeneration", {"prophetnet.decoder.ngram_embeddings.weight": "embedding",
                                                                "prophetnet.decoder.embeddings_layer_norm.weight": "embedding"}),
    ("PegasusXConfig", "PegasusXForConditionalGeneration", {"model.encoder.embed_global.weight": "embedding"}),
    # wav2vec2's front-end: the conv feature encoder, its projection, the conv position embedding (modeling_wav2vec2.py)
    ("Wav2Vec2Config", "Wav2Vec2ForCTC", {"wav2vec2.feature_extractor.conv_layers.0.conv.weight": "embedding",
                                          "wav2vec2.feature_projection.projection.weight": "embedding",
                                          "wav2vec2.masked_spec_embed": "embedding", "lm_head.weight": "cls"}),
    ("HubertConfig", "HubertForCTC", {"hubert.encoder.pos_conv_embed.conv.bias": "embedding"}),
    ("WavLMConfig", "WavLMForCTC", {"wavlm.feature_projection.layer_norm.weight": "embedding"}),
    ("Data2VecAudioConfig", "Data2VecAudioForCTC", {"data2vec_audio.feature_extractor.conv_layers.1.layer_norm.weight":
                                                    "embedding"}),
    # SigLIP's text head and logit bias; CLAP's audio projection and scales (the contrastive heads, as CLIP's)
    ("SiglipConfig", "SiglipModel", {"text_model.head.weight": "cls", "logit_bias": "cls",
                                     "vision_model.head.mlp.fc1.weight": "vision"}),
    ("ClapConfig", "ClapModel", {"audio_projection.linear1.weight": "cls", "logit_scale_a": "cls"}),
    # XLM's per-layer lists and prediction layer; Gemma 3n's per-layer embeddings and AltUp; older final norms and heads
    ("XLMConfig", "XLMWithLMHeadModel", {"transformer.attentions.1.q_lin.weight": "encoder", "pred_layer.proj.bias": "cls",
                                         "transformer.layer_norm2.0.weight": "encoder",
                                         "transformer.layer_norm_emb.weight": "embedding"}),
    ("Gemma3nTextConfig", "Gemma3nForCausalLM", {"model.embed_tokens_per_layer.weight": "embedding",
                                                 "model.per_layer_model_projection.weight": "embedding",
                                                 "model.altup_projections.0.weight": "encoder"}),
    ("OpenAIGPTConfig", "OpenAIGPTLMHeadModel", {"transformer.tokens_embed.weight": "embedding",
                                                 "transformer.positions_embed.weight": "embedding"}),
    ("CTRLConfig", "CTRLLMHeadModel", {"transformer.w.weight": "embedding"}),
    ("MegatronBertConfig", "MegatronBertForMaskedLM", {"bert.encoder.ln.weight": "encoder"}),
    ("RobertaPreLayerNormConfig", "RobertaPreLayerNormForMaskedLM", {"roberta_prelayernorm.LayerNorm.weight": "encoder"}),
    ("BioGptConfig", "BioGptForCausalLM", {"biogpt.layer_norm.weight": "encoder"}),
    ("XGLMConfig", "XGLMForCausalLM", {"model.layer_norm.weight": "encoder"}),
    ("RwkvConfig", "RwkvForCausalLM", {"rwkv.ln_out.weight": "encoder"}),
    ("MPNetConfig", "MPNetForMaskedLM", {"mpnet.encoder.relative_attention_bias.weight": "encoder"}),
    ("LukeConfig", "LukeForMaskedLM", {"luke.entity_embeddings.entity_embeddings.weight": "embedding",
                                       "entity_predictions.bias": "cls"}),
    ("DeiTConfig", "DeiTForImageClassificationWithTeacher", {"cls_classifier.weight": "cls",
                                                             "distillation_classifier.weight": "cls"}),
    ("WhisperConfig", "WhisperForCausalLM", {"proj_out.weight": "cls"}),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cfg_name,cls,where", CASES, ids=[c for _, c, _ in CASES])
def test_every_parameter_placed(tmp_path, cfg_name, cls, where):
    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg_cls = getattr(T, cfg_name)
    try:
        cfg = tiny_config(cfg_cls)
    except Exception:   # ESM's defaults hold None sizes the shrinking cannot read
        cfg = cfg_cls(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                      max_position_embeddings=64, vocab_size=33)
    cfg.tie_word_embeddings = False   # the LM head stored, not dropped as a tied copy
    model = getattr(T, cls)(cfg).eval()
    model.save_pretrained(tmp_path)
    ckpt = open_checkpoint(str(tmp_path))
    report = summarize(ckpt)
    assert report["unplaced"] == []
    assert report["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    place = placements(ckpt)
    assert {n: place[n].bucket for n in where} == where
