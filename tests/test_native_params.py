"""Mistral's and Meta's own folders (formats/native_params.py): `consolidated.safetensors` / `consolidated.00.pth`
beside `params.json` and no config.json. params.json reads as the transformers config its converters write, so the
summary names the architecture and `flops` / `memory` have a model. The oracle: the transformers class built from the
config transformers' converters write (convert_mistral_weights_to_hf.py `convert_config`,
convert_llama_weights_to_hf.py), its parameters() and FlopCounterMode on its forward; the native file holds that
model's weights under the names those converters map from (their STATE_DICT_MAPPING, read backwards)."""
from __future__ import annotations

import json
import os
import re

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from safetensors.torch import save_file  # noqa: E402
from test_families import fcm_flops, meta_model  # noqa: E402

from ckptstat.cli import main  # noqa: E402

# transformers' model names -> the native ones (convert_mistral_weights_to_hf.py's STATE_DICT_MAPPING backwards;
# Mixtral's experts as mistral_inference's MoeLayer names them)
NATIVE = [(r"^lm_head\.", "output."), (r"^model\.norm\.", "norm."), (r"^model\.embed_tokens\.", "tok_embeddings."),
          (r"^model\.layers\.(\d+)\.input_layernorm\.", r"layers.\1.attention_norm."),
          (r"^model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ffn_norm."),
          (r"^model\.layers\.(\d+)\.self_attn\.(q|k|v|o)_proj\.", r"layers.\1.attention.w\2."),
          (r"^model\.layers\.(\d+)\.mlp\.gate_proj\.", r"layers.\1.feed_forward.w1."),
          (r"^model\.layers\.(\d+)\.mlp\.down_proj\.", r"layers.\1.feed_forward.w2."),
          (r"^model\.layers\.(\d+)\.mlp\.up_proj\.", r"layers.\1.feed_forward.w3."),
          (r"^model\.layers\.(\d+)\.mlp\.gate\.", r"layers.\1.feed_forward.gate.")]


def _native_state(model) -> dict:
    out = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue   # (a tied model stores its table once: mistral_inference's tied_embeddings)
        m = re.match(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
        if m:   # transformers 5's fused experts [E, 2I, H] / [E, H, I]: one w1, w3, w2 per expert
            for e, w in enumerate(t):
                if m[2] == "down_proj":
                    out[f"layers.{m[1]}.feed_forward.experts.{e}.w2.weight"] = w.clone()
                else:
                    w1, w3 = w.chunk(2, dim=0)
                    out[f"layers.{m[1]}.feed_forward.experts.{e}.w1.weight"] = w1.clone()
                    out[f"layers.{m[1]}.feed_forward.experts.{e}.w3.weight"] = w3.clone()
            continue
        for rx, to in NATIVE:
            name, n = re.subn(rx, to, name)
            if n:
                break
        else:
            raise AssertionError(f"no native name for {name}")
        out[name] = t.clone()
    return out


DIMS = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, norm_eps=1e-5, vocab_size=96, rope_theta=1e6)
CASES = {
    # params.json, and the transformers config its converters write from it
    "mistral": (dict(DIMS, hidden_dim=96, sliding_window=32),
                lambda: T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=16, intermediate_size=96, vocab_size=96, sliding_window=32,
                                        tie_word_embeddings=False)),
    "mistral-tied": (dict(DIMS, hidden_dim=96, tied_embeddings=True),
                     lambda: T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=96,
                                             tie_word_embeddings=True)),
    "mixtral": (dict(DIMS, hidden_dim=48, moe={"num_experts": 4, "num_experts_per_tok": 2}),
                lambda: T.MixtralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=16, intermediate_size=48, vocab_size=96, num_local_experts=4,
                                        num_experts_per_tok=2, tie_word_embeddings=False)),
    # Meta's original/ folder: no head_dim, no hidden_dim: the width from dim, ffn_dim_multiplier and multiple_of
    # (int(1.3 * int(8 * 64 / 3)) = 220, up to a multiple of 32: 224)
    "llama": ({"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 96, "ffn_dim_multiplier": 1.3,
               "multiple_of": 32, "norm_eps": 1e-5, "rope_theta": 500000.0, "use_scaled_rope": True},
              lambda: T.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=224, vocab_size=96, tie_word_embeddings=False)),
}
CLASSES = {"mistral": T.MistralForCausalLM, "mistral-tied": T.MistralForCausalLM, "mixtral": T.MixtralForCausalLM,
           "llama": T.LlamaForCausalLM}


def _folder(tmp_path, case: str, pth: bool = False):
    params, config = CASES[case]
    model = meta_model(CLASSES[case], config(), "cpu")
    folder = tmp_path / case
    folder.mkdir()
    state = _native_state(model)
    if pth:
        torch.save(state, folder / "consolidated.00.pth")
    else:
        save_file(state, str(folder / "consolidated.safetensors"))
    (folder / "params.json").write_text(json.dumps(params))
    return folder, model


def _json(capsys, *args) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case", CASES)
def test_params_json_reads_as_the_converted_config(tmp_path, capsys, case):
    folder, model = _folder(tmp_path, case, pth=case == "llama")
    out = _json(capsys, "summary", str(folder), "--json")
    assert out["config"] == os.path.join(str(folder), "params.json")
    assert out["architecture"]["source"] == "params.json"
    assert out["resolved"]["model"] == type(model).__name__
    assert out["parameters"]["unique"] == model.num_parameters()
    seq = 8
    flops = _json(capsys, "flops", str(folder), "--seq", str(seq), "--json")
    assert flops["architecture"]["source"] == "params.json"
    assert flops["runs"][0]["totals"]["flops"] == fcm_flops(model, seq, device="cpu") > 0


def test_the_memory_plan_and_its_cache_follow_params_json(tmp_path, capsys):
    """The KV cache of the converted config: 2 x layers x kv_heads x head_dim per token, as transformers' cache holds."""
    folder, model = _folder(tmp_path, "mistral")
    ids = torch.arange(8).reshape(1, 8) % 96
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    held = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    out = _json(capsys, "memory", str(folder), "--seq", "8", "--batch", "1", "--json")
    assert out["parameters"]["predicted"] == out["parameters"]["count"] == model.num_parameters()
    kv = next(line for line in out["lines"] if line["group"] == "kv cache")
    assert kv["bytes"] == held * model.dtype.itemsize   # (the weights' dtype, as stored)


@pytest.mark.parametrize("params,width", [
    # the widths of Meta's published models, as their converted config.json on the Hub says
    ({"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256, "ffn_dim_multiplier": 1.3,
      "multiple_of": 1024, "norm_eps": 1e-5, "rope_theta": 500000.0}, 14336),   # Llama 3 8B
    ({"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "vocab_size": -1, "ffn_dim_multiplier": 1.3,
      "multiple_of": 4096, "norm_eps": 1e-5}, 28672),   # Llama 2 70B
    ({"dim": 16384, "n_layers": 126, "n_heads": 128, "n_kv_heads": 8, "vocab_size": 128256, "ffn_dim_multiplier": 1.2,
      "multiple_of": 4096, "norm_eps": 1e-5, "rope_theta": 500000.0}, 53248),   # Llama 3.1 405B
    ({"dim": 4096, "n_layers": 32, "n_heads": 32, "multiple_of": 256, "norm_eps": 1e-6, "vocab_size": -1}, 11008),  # 1, 7B
])
def test_meta_widths(params, width):
    from ckptstat.formats.native_params import transformers_config

    cfg, _ = transformers_config(params, {"tok_embeddings.weight": (32000, params["dim"])})
    assert cfg is not None and cfg["intermediate_size"] == width
    assert cfg["vocab_size"] == (params["vocab_size"] if params["vocab_size"] > 0 else 32000)


@pytest.mark.parametrize("params,why", [
    (dict(DIMS, hidden_dim=96, vision_encoder={"hidden_size": 32}), "a vision encoder"),
    (dict(DIMS, hidden_dim=96, moe={"num_experts": 4, "num_experts_per_tok": 2, "num_shared_experts": 1}),
     "experts beyond plain routed ones"),
    (dict(DIMS, hidden_dim=96, sliding_window=[32, None]), "a sliding window per layer"),
    (dict(DIMS, hidden_dim=96, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8), "multi-head latent attention"),
    ({"learning_rate": 0.1, "epochs": 3}, "not a Mistral or Meta model description"),
])
def test_what_params_json_does_not_convert_is_said_and_the_weights_still_count(tmp_path, capsys, params, why):
    folder, model = _folder(tmp_path, "mistral")
    (folder / "params.json").write_text(json.dumps(params))
    out = _json(capsys, "summary", str(folder), "--json")
    assert out["config"] is None and out["parameters"]["unique"] == model.num_parameters()
    assert any(why in n for n in out["notes"])


def test_config_json_comes_first_and_params_json_may_be_named(tmp_path, capsys):
    """A Mistral repository ships both: config.json is read, as transformers reads it. `--config params.json` converts."""
    folder, model = _folder(tmp_path, "mixtral")
    T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=48, vocab_size=96).save_pretrained(folder)
    out = _json(capsys, "summary", str(folder), "--json")
    assert out["architecture"]["model_type"] == "mistral" and out["config"].endswith("config.json")
    out = _json(capsys, "summary", str(folder), "--config", str(folder / "params.json"), "--json")
    assert out["architecture"]["model_type"] == "mixtral" and out["architecture"]["source"] == "params.json"
    assert out["resolved"]["model"] == "MixtralForCausalLM"


def test_params_json_linked_out_of_the_folder_is_refused(tmp_path, capsys):
    folder, _ = _folder(tmp_path, "mistral")
    outside = tmp_path / "elsewhere.json"
    os.replace(folder / "params.json", outside)
    os.symlink(outside, folder / "params.json")
    assert main(["summary", str(folder)]) != 0
    err = capsys.readouterr().err
    assert "params.json" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# ---- Meta's model-parallel original/ folders (formats/model_parallel.py) ----

def _meta_folder(tmp_path, ranks: int, llama3: bool):
    """A Llama as Meta's reference code saves it on `ranks` model-parallel ranks: each consolidated.NN.pth one rank's
    slice of every weight, split where convert_llama_weights_to_hf.py joins it (wo, w2 and Llama 1/2's embedding
    along dimension 1, the rest along 0; the norms whole in every file)."""
    params, config = CASES["llama"]
    params = dict(params, vocab_size=96 if llama3 else -1)
    model = meta_model(T.LlamaForCausalLM, config(), "cpu")
    whole = _native_state(model)
    folder = tmp_path / f"mp{ranks}"
    folder.mkdir()
    for r in range(ranks):
        part = {}
        for name, t in whole.items():
            if t.dim() == 1:
                part[name] = t.clone()
                continue
            dim = 1 if re.search(r"(attention\.wo|feed_forward\.w2)\.weight$", name) or (
                name == "tok_embeddings.weight" and not llama3) else 0
            part[name] = t.chunk(ranks, dim=dim)[r].clone()
        torch.save(part, folder / f"consolidated.{r:02d}.pth")
    (folder / "params.json").write_text(json.dumps(params))
    return folder, model, whole


@pytest.mark.parametrize("llama3", [True, False], ids=["llama3-vocab-rows", "llama2-vocab-columns"])
def test_model_parallel_files_join_as_the_converter_joins_them(tmp_path, capsys, llama3):
    from ckptstat import open_checkpoint

    folder, model, whole = _meta_folder(tmp_path, 2, llama3)
    out = _json(capsys, "summary", str(folder), "--json")
    assert out["resolved"]["model"] == "LlamaForCausalLM"
    assert out["parameters"]["unique"] == model.num_parameters()
    listed = {t["name"]: tuple(t["shape"]) for t in _json(capsys, "tensors", str(folder), "--json")["tensors"]}
    assert listed == {n: tuple(t.shape) for n, t in whole.items()}
    flops = _json(capsys, "flops", str(folder), "--seq", "8", "--json")
    assert flops["runs"][0]["totals"]["flops"] == fcm_flops(model, 8, device="cpu")
    with open_checkpoint(str(folder)) as ckpt:
        for name in ("tok_embeddings.weight", "layers.0.attention.wo.weight", "layers.1.feed_forward.w1.weight",
                     "layers.0.attention_norm.weight"):
            got = ckpt.read_elements(name, 0, whole[name].numel())
            assert torch.equal(torch.from_numpy(got.copy()), whole[name].reshape(-1))


def test_a_missing_or_mismatched_model_parallel_file_is_one_line(tmp_path, capsys):
    folder, _, _ = _meta_folder(tmp_path, 3, True)
    os.remove(folder / "consolidated.01.pth")
    assert main(["summary", str(folder)]) != 0
    err = capsys.readouterr().err
    assert "consolidated.01.pth" in err and "missing" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "b").mkdir()
    folder, _, _ = _meta_folder(tmp_path / "b", 2, True)
    part = torch.load(folder / "consolidated.01.pth")
    torch.save({n: t for n, t in part.items() if n != "norm.weight"}, folder / "consolidated.01.pth")
    assert main(["summary", str(folder)]) != 0
    err = capsys.readouterr().err
    assert "norm.weight" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_sharded_consolidated_files_with_their_index(tmp_path, capsys):
    """Mistral's larger repositories: consolidated-0000N-of-0000M.safetensors and consolidated.safetensors.index.json."""
    folder, model = _folder(tmp_path, "mistral")
    state = _native_state(model)
    os.remove(folder / "consolidated.safetensors")
    names, weight_map = sorted(state), {}
    for i, part in enumerate((names[::2], names[1::2])):
        file = f"consolidated-{i + 1:05d}-of-00002.safetensors"
        save_file({n: state[n] for n in part}, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "consolidated.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    out = _json(capsys, "summary", str(folder / "consolidated.safetensors.index.json"), "--json")
    assert out["architecture"]["source"] == "params.json" and out["resolved"]["model"] == "MistralForCausalLM"
    assert out["parameters"]["unique"] == model.num_parameters()


def test_one_model_parallel_file_counts_its_slice_without_the_whole_model_s_config(tmp_path, capsys):
    """One rank's file opened alone holds a slice of every weight: params.json (the whole model's) is not its config,
    which would plan the whole model on a slice's count; a note points at the folder."""
    folder, model, whole = _meta_folder(tmp_path, 2, True)
    out = _json(capsys, "summary", str(folder / "consolidated.01.pth"), "--json")
    part = torch.load(folder / "consolidated.01.pth")
    assert out["config"] is None and out["parameters"]["unique"] == sum(t.numel() for t in part.values())
    assert any("model-parallel" in n and "open the folder" in n for n in out["notes"])
