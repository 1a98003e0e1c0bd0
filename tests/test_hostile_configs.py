"""Config values and command-line numbers the analytic commands divide by, loop over, match with or build from
(a helper's red-team run over every model_type, 2026-12-07): each refused in one line naming the key, or modelled as
the library reads it. Oracles: transformers 5's own default configs (the releases' sizes: an MoE whose layers x
experts fit is modelled, whichever name its expert count goes by), transformers' `should_convert_module` for the
modules a quantization_config leaves alone, and configs transformers writes with one value changed."""
from __future__ import annotations

import json

import pytest
import transformers
from transformers.quantizers.quantizers_utils import should_convert_module

from ckptstat.analysis.memory.quant import Quant, config_quant, hf_name
from ckptstat.census.model import load
from ckptstat.errors import NoAnalyticModel, UsageError

EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def _config(tmp_path, model_type: str, name: str = "config.json", text: str | None = None, **changes) -> str:
    cfg = transformers.AutoConfig.for_model(model_type).to_dict()
    cfg.update(changes)
    path = tmp_path / f"{model_type}-{name}"
    path.write_text(text if text is not None else json.dumps(cfg))
    return str(path)


def _one_line(cli, *args: str, says: str) -> None:
    rc, out, err = cli(*args)
    assert rc == 2 and out == "" and err.count("\n") == 1 and says in err and "internal error" not in err, (args, err)


def test_default_moe_configs_are_modelled_whatever_their_expert_count_is_called(tmp_path):
    checked = 0
    for mt in sorted(transformers.CONFIG_MAPPING.keys()):
        try:
            cfg = transformers.AutoConfig.for_model(mt).to_dict()
        except Exception:
            continue
        experts = next((cfg[k] for k in EXPERTS if type(cfg.get(k)) is int and cfg[k] > 1), None)
        layers = cfg.get("num_hidden_layers")
        if experts is None or type(layers) is not int or layers * experts > 1 << 15:
            continue
        path = tmp_path / f"{mt}.json"
        path.write_text(json.dumps(cfg))
        try:
            load(str(path))
        except NoAnalyticModel:
            continue     # no op template for it (the meta path answers)
        except UsageError as e:
            assert "blocks" not in str(e), (mt, str(e))
            continue
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("block, says", [([-1, 1], "weight_block_size"), ([0, 0], "weight_block_size"),
                                         ([True, False], "weight_block_size"), (["a", "b"], "weight_block_size"),
                                         ([[1], [2]], "weight_block_size"), ([0.5, 128], "weight_block_size")])
def test_an_fp8_block_is_two_positive_integers(tmp_path, cli, block, says):
    q = {"quant_method": "fp8", "weight_block_size": block, "activation_scheme": "dynamic"}
    _one_line(cli, "memory", _config(tmp_path, "deepseek_v3", quantization_config=q), "--gpu", "H100", says=says)


@pytest.mark.parametrize("entries, says", [(["(.*.*)*X"], "repeats a repetition"), (["(a+)+$"], "repeats a repetition"),
                                           (["((.*))*X"], "repeats a repetition"), (["(.|.)*X"], "repeats a repetition"),
                                           (["X" + ".*" * 10 + "Y"], "repeats a repetition"),
                                           (["("], "not a regular expression"), ([["x"]], "not a list"),
                                           ([f"m{i}" for i in range(10_001)], "not a list")])
def test_modules_left_alone_are_bounded_regexes(tmp_path, cli, entries, says):
    q = {"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": entries}
    _one_line(cli, "memory", _config(tmp_path, "qwen3", quantization_config=q), says=says)


def test_modules_left_alone_match_as_transformers_matches_them():
    patterns = ["lm_head", "model.layers.0.mlp", "self_attn", r"model\.layers\.\d+\.mlp\.gate_proj", "layers.*k_proj",
                "mlp.gate"]
    quant, _ = config_quant({"quant_method": "fp8", "weight_block_size": [128, 128],
                             "modules_to_not_convert": patterns})
    assert isinstance(quant, Quant)
    for module in ("layers[3].self_attn.q_proj", "layers[0].mlp.gate_proj", "layers[1].mlp.up_proj",
                   "layers[2].self_attn.k_proj", "layers[5].mlp.down_proj"):
        assert quant.converts(module) == should_convert_module(hf_name(module), patterns), module


@pytest.mark.parametrize("model_type, key, value, command", [
    ("whisper", "encoder_attention_heads", 0, "flops"), ("whisper", "decoder_attention_heads", 0, "memory"),
    ("whisper", "max_source_positions", 0, "flops"), ("mamba", "time_step_rank", 0, "flops"),
    ("falcon_h1", "mamba_chunk_size", 0, "memory"), ("mamba2", "chunk_size", 0, "flops"),
    ("minimax", "block_size", 0, "flops"), ("zamba2", "num_mem_blocks", 0, "memory"),
    ("longcat_flash", "zero_expert_num", 10 ** 400, "flops"), ("llama", "attention_dropout", 10 ** 400, "memory"),
    ("mixtral", "sliding_window", 10 ** 400, "flops"), ("llama4_text", "attention_chunk_size", 10 ** 400, "flops")])
def test_values_the_templates_divide_by_are_refused_naming_them(tmp_path, cli, model_type, key, value, command):
    _one_line(cli, command, _config(tmp_path, model_type, **{key: value}), says=key)


def test_a_zero_width_feed_forward_is_planned(tmp_path, cli):
    rc, out, err = cli("memory", _config(tmp_path, "bert", intermediate_size=0), "--json")
    assert rc == 0 and json.loads(out)["lines"], err


def test_the_meta_path_builds_no_more_layers_than_it_bounds(tmp_path, cli):
    rc, out, err = cli("flops", _config(tmp_path, "squeezebert", num_hidden_layers=5000))
    assert rc != 0 and out == "" and err.count("\n") == 1 and "internal error" not in err, err


def test_a_bare_config_nested_too_deep_is_one_line(tmp_path, cli):
    path = tmp_path / "deep.json"
    path.write_text('{"model_type": "llama", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    for command in ("flops", "memory"):
        rc, out, err = cli(command, str(path))
        assert rc != 0 and out == "" and err.count("\n") == 1 and "internal error" not in err, err


@pytest.mark.parametrize("args, says", [(("flops", "--seq", str(10 ** 400)), "--seq"),
                                        (("flops", "--seq", ",".join(map(str, range(1, 1100)))), "--seq"),
                                        (("flops", "--seq", "²"), "--seq"),
                                        (("memory", "--batch", str(10 ** 400)), "--batch"),
                                        (("memory", "--gpus", str(10 ** 29)), "--gpus"),
                                        (("flops", "--images", str(10 ** 30)), "--images"),
                                        (("memory", "--gpu", ""), "--gpu")])
def test_command_line_numbers_are_bounded(tmp_path, cli, args, says):
    _one_line(cli, args[0], _config(tmp_path, "llama"), *args[1:], says=says)
