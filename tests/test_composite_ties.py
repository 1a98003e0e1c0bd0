"""EncoderDecoderModel, VisionEncoderDecoderModel and SpeechEncoderDecoderModel tie what their decoder ties: the
decoder is `AutoModelForCausalLM.from_config(config.decoder)`, so a TrOCR-style GPT-2 decoder ties `decoder.lm_head`
to `decoder.transformer.wte`, by the decoder config's own `tie_word_embeddings` (families/tie_table.py `_composite`,
docs/ties.md "Ties named by the class"). The tie table's rows for the three wrappers were built with their default BERT
decoder, so before, a save_pretrained file of any other decoder (GPT-2, TrOCR, mBART, RoBERTa) had its dropped LM head
named by nothing: the tie verdict said no tie, and the every-name and torchinfo rows lacked the head.

Each model is built tiny with transformers and saved by `save_pretrained`; the oracle is the model object (its tie
groups in the names save_pretrained writes, `parameters()`, `named_parameters(remove_duplicate=False)`).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import model_oracle, report_rows, report_ties, saved_names  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.ties import audit  # noqa: E402

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48)
DEC = dict(is_decoder=True, add_cross_attention=True)


def _vit():
    return T.ViTConfig(**SMALL, image_size=32, patch_size=8)


def _decoder(kind: str, tied: bool):
    if kind == "gpt2":
        return T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=101, n_positions=64, tie_word_embeddings=tied, **DEC)
    if kind == "trocr":
        return T.TrOCRConfig(d_model=32, decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=48, vocab_size=101,
                             max_position_embeddings=64, tie_word_embeddings=tied, **DEC)
    if kind == "mbart":
        return T.MBartConfig(d_model=32, decoder_layers=2, encoder_layers=2, decoder_attention_heads=2, encoder_attention_heads=2,
                             decoder_ffn_dim=48, encoder_ffn_dim=48, vocab_size=101, max_position_embeddings=64,
                             tie_word_embeddings=tied, **DEC)
    return T.RobertaConfig(**SMALL, vocab_size=101, max_position_embeddings=64, tie_word_embeddings=tied, **DEC)


def _model(wrapper: str, kind: str, tied: bool):
    if wrapper == "vision":
        cfg = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(_vit(), _decoder(kind, tied))
        return T.VisionEncoderDecoderModel(cfg)
    if wrapper == "speech":
        enc = T.Wav2Vec2Config(**SMALL, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16)
        return T.SpeechEncoderDecoderModel(T.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(enc, _decoder(kind, tied)))
    enc = T.BertConfig(**SMALL, vocab_size=101, max_position_embeddings=64)
    return T.EncoderDecoderModel(T.EncoderDecoderConfig.from_encoder_decoder_configs(enc, _decoder(kind, tied)))


CASES = [("vision", "gpt2", True), ("vision", "gpt2", False), ("vision", "trocr", True), ("vision", "mbart", True),
         ("text", "roberta", True), ("text", "gpt2", True), ("speech", "gpt2", True)]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("wrapper,kind,tied", CASES, ids=[f"{w}-{k}-{'tied' if t else 'untied'}" for w, k, t in CASES])
def test_decoder_ties_of_a_composite(tmp_path, wrapper, kind, tied):
    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = _model(wrapper, kind, tied).eval()
    as_saved = saved_names(model, model_oracle(model))
    assert bool(as_saved["ties"]) == tied
    model.save_pretrained(tmp_path)
    report = audit(open_checkpoint(str(tmp_path)))
    assert report_ties(report) == as_saved["ties"]
    rows = report_rows(report)
    assert rows["unique parameters"] == as_saved["params"]
    assert rows["every name counted"] == sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
