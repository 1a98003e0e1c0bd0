"""BART / mBART, Whisper, T5Gemma and Mamba beyond tests/test_families.py's parameter and FLOPs walk: the cache
each family's memory line predicts against the cache the transformers model allocates on a forward,
Whisper's audio inputs (--frames, --audio-seconds, --dec-seq) through the CLI against FlopCounterMode,
and `ckptstat run` on a Whisper checkpoint written by save_pretrained."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from conftest import held_bytes  # noqa: E402
from test_families import fcm_flops, meta_model  # noqa: E402

from ckptstat.errors import UsageError  # noqa: E402
from ckptstat.families import bart, get, mamba, t5gemma, whisper  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

B, S_ENC, S_DEC = 2, 7, 5


def _tiny(config_cls: str, model_cls: str, sizes: dict):
    torch.manual_seed(0)
    return getattr(T, model_cls)(getattr(T, config_cls)(**sizes)).eval()


def _spec(model):
    d = model.config.to_dict()
    d["architectures"] = [type(model).__name__]
    return from_config(d)


def _bytes(tensors) -> int:
    return held_bytes(tensors)


def _layer_bytes(cache) -> int:
    return _bytes([x for layer in cache.layers for x in (layer.keys, layer.values)])


@pytest.mark.parametrize("config_cls,model_cls,sizes,inputs", [
    ("BartConfig", "BartForConditionalGeneration", bart._SIZES, "input_ids"),
    ("MBartConfig", "MBartForConditionalGeneration", bart._SIZES, "input_ids"),
    ("M2M100Config", "M2M100ForConditionalGeneration", bart._SIZES, "input_ids"),
    ("WhisperConfig", "WhisperForConditionalGeneration", whisper._SIZES, "input_features"),
    # the decoder's own sizes, its sliding layers (window 4) keeping 3 of S_DEC's tokens, the cross cache every layer's
    ("T5GemmaConfig", "T5GemmaForConditionalGeneration", t5gemma._SIZES, "input_ids"),
])
def test_encoder_decoder_cache_bytes_equal_the_models_cache(config_cls, model_cls, sizes, inputs):
    model = _tiny(config_cls, model_cls, sizes)
    c = model.config
    dec = torch.ones((B, S_DEC), dtype=torch.long)
    if inputs == "input_features":
        frames = 2 * c.max_source_positions
        kw = {"input_features": torch.zeros((B, c.num_mel_bins, frames))}
        enc_len = frames   # ckptstat counts Whisper's encoder input in mel frames
    else:
        kw = {"input_ids": torch.ones((B, S_ENC), dtype=torch.long)}
        enc_len = S_ENC
    with torch.no_grad():
        cache = model(**kw, decoder_input_ids=dec, use_cache=True).past_key_values
    spec = _spec(model)
    kv_cache = get(spec.family).kv_cache
    assert kv_cache is not None
    self_line, cross_line = (x[1] for x in kv_cache(spec, B, enc_len, S_DEC, 4))
    assert self_line == _layer_bytes(cache.self_attention_cache)
    assert cross_line == _layer_bytes(cache.cross_attention_cache)


@pytest.fixture
def whisper_config(tmp_path):
    cfg = T.WhisperConfig(**whisper._SIZES)
    d = cfg.to_dict()
    d["architectures"] = ["WhisperForConditionalGeneration"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return cfg, str(p)


def _flops(cli, *args) -> dict:
    rc, out, err = cli("flops", *args, "--json")
    assert rc == 0, err
    return json.loads(out)["runs"][0]


def test_whisper_summary_figures_at_the_audio_defaults(cli, tmp_path):
    """The summary's forward figure is the `flops` default input (2 x max_source_positions mel frames, decoder
    128 tokens or its positions if fewer), not a text length of 128."""
    model = _tiny("WhisperConfig", "WhisperForConditionalGeneration", whisper._SIZES)
    model.save_pretrained(tmp_path)
    cfg = model.config
    frames, dec = 2 * cfg.max_source_positions, min(128, cfg.max_target_positions)
    rc, out, err = cli(str(tmp_path), "--json")
    an = json.loads(out)["analytic"]
    assert rc == 0 and (an["seq"], an["dec_seq"], an["input"]) == (frames, dec, "mel frames"), an
    expected = fcm_flops(meta_model(T.WhisperForConditionalGeneration, cfg), dec, 1, main_input="input_features",
                         frames=frames)
    assert an["flops_per_token"] * frames == pytest.approx(expected)
    said = " ".join(cli(str(tmp_path))[1].split())   # prose wraps at 80 columns
    assert f"{frames} mel frames (default: 2 x max_source_positions), decoder {dec} tokens" in said
    assert "input 10 mel frames (--seq), decoder" in " ".join(cli(str(tmp_path), "-s", "10")[1].split())   # said 'default'
    report = cli("report", str(tmp_path), "--no-stats")[1]   # said the text models' rule, 128 or the positions
    assert f"seq {frames}, decoder seq {dec} (default: 2 x max\\_source\\_positions)" in report


@pytest.mark.parametrize("flag", [[], ["--frames", "24"], ["--audio-seconds", "0.24"]])
def test_whisper_audio_inputs_through_the_cli(cli, whisper_config, flag):
    cfg, path = whisper_config
    frames = 2 * cfg.max_source_positions   # 24: the one length transformers' Whisper encoder accepts
    model = meta_model(T.WhisperForConditionalGeneration, cfg)
    run = _flops(cli, path, "--dec-seq", "9", "-b", "2", *flag)
    assert (run["seq"], run["dec_seq"]) == (frames, 9)
    expected = fcm_flops(model, 9, 2, main_input="input_features", frames=frames)
    assert run["totals"]["flops"] == expected
    # default decoder length: 128, or the decoder's learned positions if fewer (40 here)
    assert _flops(cli, path, *flag)["dec_seq"] == cfg.max_target_positions
    # the seq line names the option that set the length, or the default's rule (said '(--seq)' when none was given)
    why = flag[0] if flag else "default: 2 x max_source_positions"
    for cmd in ("flops", "memory"):
        assert f"seq          {frames} mel frames ({why})" in cli(cmd, path, *flag)[1], (cmd, flag)


def test_audio_and_decoder_options_refused_where_they_do_not_apply(cli, whisper_config, tmp_path):
    _, path = whisper_config
    for args, words in [(["--frames", "25"], "25 mel frames exceed the encoder's 24"),
                        (["--audio-seconds", "1"], "100 mel frames exceed"),
                        (["--dec-seq", "41"], "--dec-seq 41 exceeds the decoder's 40"),
                        (["--frames", "8", "--audio-seconds", "1"], "not both")]:
        for cmd in ("flops", "memory"):
            rc, out, err = cli(cmd, path, *args)
            assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, (cmd, args, err)
    d = T.BartConfig(**bart._SIZES).to_dict()
    d["architectures"] = ["BartForConditionalGeneration"]
    p = tmp_path / "bart.json"
    p.write_text(json.dumps(d))
    rc, _, err = cli("flops", str(p), "--frames", "10")
    assert rc == 2 and "audio models" in err and "reads token ids" in err
    d = T.ViTConfig(image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2).to_dict()
    d["architectures"] = ["ViTForImageClassification"]
    vit = tmp_path / "vit.json"
    vit.write_text(json.dumps(d))
    rc, _, err = cli("flops", str(vit), "--frames", "10")   # said 'vit reads token ids (use --seq)'
    assert rc == 2 and "vit reads images (use --image-size)" in err
    rc, _, err = cli("memory", str(p), "--dec-seq", "63")   # 64 positions + offset 2: 64 usable
    assert rc == 0, err
    rc, _, err = cli("memory", str(p), "--dec-seq", "65")
    assert rc == 2 and "--dec-seq 65" in err


def test_bart_dec_seq_flops_equal_flop_counter(cli, tmp_path):
    cfg = T.BartConfig(**bart._SIZES)
    d = cfg.to_dict()
    d["architectures"] = ["BartForConditionalGeneration"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    model = meta_model(T.BartForConditionalGeneration, cfg)
    with torch.device("meta"), torch.no_grad():
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as counter:
            model(input_ids=torch.ones((2, 11), dtype=torch.long), decoder_input_ids=torch.ones((2, 3), dtype=torch.long))
    run = _flops(cli, str(p), "-s", "11", "--dec-seq", "3", "-b", "2")
    assert run["totals"]["flops"] == counter.get_total_flops()


def test_run_builds_whisper_inputs_from_input_features(tmp_path):
    from ckptstat.executor import execute

    model = _tiny("WhisperConfig", "WhisperForConditionalGeneration", whisper._SIZES)
    model.save_pretrained(tmp_path)
    for seq in (6, None):   # None: 128 decoder tokens, or the decoder's 40 positions if fewer
        r = execute(str(tmp_path), batch=1, seq=seq, warmup=0, iters=1)
        assert r["outputs_finite"] and r["weights"]["missing"] == []
        assert r["seq"] == (seq or model.config.max_target_positions)
        assert r["flops"]["measured"] == r["flops"]["analytic"]
    with pytest.raises(UsageError, match="--seq 41 exceeds the decoder's 40"):
        execute(str(tmp_path), seq=41, warmup=0, iters=1)


MY_CASES = [pytest.param(f, s, name, id=f"{f.name}-{name}-{i}")
            for f in (bart.FAMILY, whisper.FAMILY, mamba.FAMILY) for i, s in enumerate(f.samples) for name in s.models]


@pytest.mark.parametrize("family,sample,model_name", MY_CASES)
def test_expected_tensors_are_the_models_named_parameters(family, sample, model_name):
    """The `ckptstat ties` cross-check template: every name the model has, tied copies included."""
    model = meta_model(getattr(T, model_name), getattr(T, sample.config)(**sample.kwargs))
    expected = family.expected_tensors(_spec(model))
    assert expected == {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}


@pytest.mark.parametrize("config_cls,model_cls,sizes", [
    ("BartConfig", "BartForConditionalGeneration", bart._SIZES),
    ("MBartConfig", "MBartForConditionalGeneration", dict(bart._SIZES, tie_word_embeddings=False)),
    ("M2M100Config", "M2M100ForConditionalGeneration", bart._SIZES),
    ("WhisperConfig", "WhisperForConditionalGeneration", whisper._SIZES),
    ("MambaConfig", "MambaForCausalLM", mamba._SIZES),
])
def test_ties_on_a_saved_model(cli, tmp_path, config_cls, model_cls, sizes):
    model = _tiny(config_cls, model_cls, sizes)
    model.save_pretrained(tmp_path)
    rc, out, err = cli("ties", str(tmp_path), "--json")
    assert rc == 0, err
    r = json.loads(out)
    params = {row["convention"]: row["params"] for row in r["counting"]["rows"]}
    assert params[f"model.parameters() of {model_cls}"] == sum(p.numel() for p in model.parameters())
    assert r["cross_check"]["unexpected"] == [] and r["cross_check"]["shape_mismatches"] == []
    assert all(m["why"] != "not in the file" for m in r["cross_check"]["missing"])


@pytest.mark.parametrize("save", ["save_pretrained", "torch.save"])
@pytest.mark.parametrize("model_cls", ["BartForConditionalGeneration", "BartModel"])
@pytest.mark.parametrize("tied", [True, False])
def test_bart_weights_alone_predict_the_models_parameters(tmp_path, tied, model_cls, save):
    """Without config.json the names and shapes say whether the embeddings are tied (transformers 5: lm_head and each
    stack's embed_tokens are `shared` only with tie_word_embeddings): an lm_head or embed_tokens stored apart is
    untied, an absent one or an alias of `shared` (torch.save keeps every tied name over one storage) is tied."""
    from ckptstat import open_checkpoint, summarize

    model = _tiny("BartConfig", model_cls, dict(bart._SIZES, tie_word_embeddings=tied))
    if save == "save_pretrained":
        model.save_pretrained(tmp_path)
        path = tmp_path / "model.safetensors"
    else:
        path = tmp_path / "pytorch_model.bin"
        torch.save(model.state_dict(), path)
    analytic = summarize(open_checkpoint(str(path)))["analytic"]
    assert analytic["predicted_params"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("tied", [True, False])
def test_m2m100_weights_alone_read_as_m2m100(tmp_path, tied):
    """An M2M100 file holds no position table (a non-persistent sinusoidal buffer): without config.json its names
    (no layernorm_embedding, a final layer_norm, no embed_positions) read as M2M100's stack, not Blenderbot's (whose
    learned table a file holds), and its parameters are the model's."""
    from ckptstat import open_checkpoint, summarize

    model = _tiny("M2M100Config", "M2M100ForConditionalGeneration", dict(bart._SIZES, tie_word_embeddings=tied))
    model.save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    analytic = summarize(open_checkpoint(str(tmp_path / "model.safetensors")))["analytic"]
    assert analytic["predicted_params"] == sum(p.numel() for p in model.parameters())
    assert "no config: the names show a m2m_100-shaped stack" in analytic["notes"]
    assert not any("embed_positions" in n for n in analytic["notes"])
