"""ckptstat flops / memory through the CLI, the summary's analytic block, and inference from names."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from ckptstat import bert_stat, open_checkpoint, summarize
from ckptstat.analysis.memory import report as memory_report
from ckptstat.census.model import from_checkpoint, load
from ckptstat.cli import main
from ckptstat.errors import UsageError
from ckptstat.families.framework.graph import build

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures")


def run_json(capsys, *args):
    rc = main(list(args) + ["--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("name", ["bert-tiny", "bert-tiny-mlm", "gpt2-tiny", "llama-tiny-sharded"])
def test_prediction_agrees_with_checkpoint(capsys, name):
    r = run_json(capsys, "flops", os.path.join(FIX, name), "--seq", "8,16", "--batch", "2")
    assert r["schema"] == "ckptstat.flops/1"
    s = summarize(os.path.join(FIX, name))
    assert r["parameters"]["checkpoint"] == s["parameters"]["unique"] == r["parameters"]["predicted"]
    assert r["parameters"]["agree"] is True
    assert [x["tokens"] for x in r["runs"]] == [16, 32]


@pytest.mark.parametrize("name", ["bert-tiny", "bert-tiny-mlm", "gpt2-tiny", "llama-tiny-sharded"])
def test_inference_from_tensor_names_matches_config(name):
    ckpt = open_checkpoint(os.path.join(FIX, name))
    with_cfg = from_checkpoint(ckpt)
    names_only = from_checkpoint(dataclasses.replace(ckpt, config=None))   # a view without config.json
    assert names_only.spec.source == "tensor names"
    assert names_only.predicted["total"] == with_cfg.predicted["total"] == names_only.checkpoint_params
    # Everything but the rotary table's tiny outer product (d/2 x s, d assumed without a config) is exact.
    ours = lambda m: sum(o.macs * o.calls for o in build(m.spec, 2, 16) if not o.module.startswith("rotary"))  # noqa: E731
    assert ours(names_only) == ours(with_cfg)
    assert names_only.notes   # what was assumed is said


def test_disagreement_is_reported(capsys, tmp_path):
    cfg = json.load(open(os.path.join(FIX, "bert-tiny-mlm", "config.json")))
    cfg["architectures"] = ["BertModel"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    weights = os.path.join(FIX, "bert-tiny-mlm", "model.safetensors")
    r = run_json(capsys, "flops", weights, "--config", str(p), "--seq", "32")
    assert r["parameters"]["agree"] is False
    assert any("disagree" in n for n in r["notes"])
    assert main(["flops", weights, "--config", str(p), "--seq", "32"]) == 0
    assert "DISAGREE" in capsys.readouterr().out


def test_bare_config_and_human_output(capsys):
    cfg = os.path.join(FIX, "gpt2-tiny", "config.json")
    r = run_json(capsys, "flops", cfg, "-s", "4", "-s", "8")
    assert r["parameters"]["checkpoint"] is None
    assert r["parameters"]["predicted"] == summarize(os.path.join(FIX, "gpt2-tiny"))["parameters"]["unique"]
    assert main(["flops", cfg, "--convention", "bertstat", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    assert "lm_head" in out and "Bertstat" in out and "FLOPs" in out


def test_memory_rules(capsys):
    r = run_json(capsys, "memory", os.path.join(FIX, "llama-tiny-sharded"), "--batch", "3", "--seq", "10")
    assert r["schema"] == "ckptstat.memory/1"
    cfg = json.load(open(os.path.join(FIX, "llama-tiny-sharded", "config.json")))
    lines = {(x["group"], x["item"]): x for x in r["lines"]}
    kv = lines[("kv cache", "b=3, s=10")]
    d = cfg["head_dim"]
    assert kv["bytes"] == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * d * 10 * 3 * 4  # stored F32
    P = r["parameters"]["count"]
    assert lines[("training state", "mixed-precision Adam")]["bytes"] == 16 * P
    assert lines[("weights what-if", "int4")]["bytes"] == P // 2
    assert lines[("weights", "as stored (F32)")]["bytes"] == 4 * P
    # the reference activation lines are the planner's for one device (its rules are tested against what torch
    # saves and allocates in tests/test_memory_planner.py), not a second formula beside them
    for mode in ("inference", "training"):
        fit = run_json(capsys, "memory", os.path.join(FIX, "llama-tiny-sharded"), "--batch", "3", "--seq", "10",
                       "--mode", mode)["fit"]["lines"]
        planned = [(x["item"], x["bytes"], x["rule"]) for x in fit if x["group"] == "activations"]
        assert planned == [(x["item"], x["bytes"], x["rule"]) for x in r["lines"]
                           if x["group"] == f"activations ({mode})"]
    assert lines[("training state", "total with activations")]["bytes"] == 16 * P + sum(
        x["bytes"] for x in r["lines"] if x["group"] == "activations (training)")
    assert all(x["rule"] for x in r["lines"])
    assert main(["memory", os.path.join(FIX, "bert-tiny"), "--seq", "64"]) == 0
    out = capsys.readouterr().out
    assert "kv cache" not in out and "activations (training)" in out   # an encoder has no KV cache


def test_llama2_kv_cache_oracle(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                   num_attention_heads=32).to_dict()
    cfg.update(architectures=["LlamaForCausalLM"], torch_dtype="float16")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = memory_report(load(p), 1, 1)
    kv = next(x for x in r["lines"] if x["group"] == "kv cache")
    assert kv["bytes"] == 524_288
    assert r["lines"][0]["bytes"] == 2 * 6_738_415_616


def test_summary_block_and_bert_stat(capsys):
    r = summarize(os.path.join(FIX, "bert-tiny"))
    an = r["analytic"]
    assert an["agree"] is True and an["seq"] == 64 and an["flops_per_token"] > 0
    assert main(["summary", os.path.join(FIX, "bert-tiny")]) == 0
    out = capsys.readouterr().out
    assert "FLOPs/token" in out and "in bf16" in out
    b = bert_stat(os.path.join(FIX, "bert-tiny"), (2, 16), show=True)
    assert "input_size   (2, 16)" in capsys.readouterr().out
    ops = build(from_checkpoint(open_checkpoint(os.path.join(FIX, "bert-tiny"))).spec, 2, 16)
    assert b["flops"]["flops"] == 2 * sum(o.macs * o.calls for o in ops)
    with pytest.raises(UsageError, match="exceeds the model's 64 learned positions"):
        bert_stat(os.path.join(FIX, "bert-tiny"), (1, 128), show=False)


def test_bad_input(capsys, tmp_path):
    p = tmp_path / "config.json"
    # no op template, and on the meta device the default --seq is too few raw samples for its feature encoder
    p.write_text(json.dumps({"model_type": "wav2vec2"}))
    assert main(["flops", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wav2vec2" in err.lower()
    p.write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    assert main(["flops", str(p)]) == 2
    assert "config has no" in capsys.readouterr().err
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 8, "n_head": 0, "n_layer": 1, "vocab_size": 5,
                             "n_positions": 4}))
    assert main(["flops", str(p)]) == 2
    assert "n_head = 0 is not a positive integer" in capsys.readouterr().err
    # DeepseekV2Config's own default (released configs set it): null, which transformers cannot route by either;
    # the line said "= 0", a value the file does not hold
    T = pytest.importorskip("transformers")
    cfg = T.DeepseekV2Config(architectures=["DeepseekV2ForCausalLM"])
    assert cfg.num_experts_per_tok is None
    cfg.to_json_file(p)
    assert main(["flops", str(p)]) == 2
    assert "num_experts_per_tok = null is not a positive integer" in capsys.readouterr().err
    assert main(["flops", os.path.join(FIX, "bert-tiny"), "--seq", "0"]) == 2
    assert main(["memory", os.path.join(FIX, "bert-tiny"), "--batch", "-1"]) == 2
    assert main(["flops", os.path.join(FIX, "bert-tiny"), "--convention", "nope"]) == 2
    # a bad config must not break the summary: the analytic block carries the error instead
    q = tmp_path / "m"
    q.mkdir()
    (q / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (q / "model.safetensors").write_bytes(open(os.path.join(FIX, "bert-tiny", "model.safetensors"), "rb").read())
    s = summarize(str(q))
    assert "error" in s["analytic"]


@pytest.mark.parametrize("seq", [16, 32])
def test_summary_seq_is_the_forward_flopcountermode_counts(capsys, seq):
    """`summary --seq N`: its FLOPs-per-token line at N, as FlopCounterMode counts the forward of the model
    config.json names (eager attention: the scores are matmuls) on N tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    folder = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gpt2-tiny")
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder),
                                                          attn_implementation="eager").eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, seq, dtype=torch.long))
    assert main(["summary", folder, "--seq", str(seq), "--json"]) == 0
    analytic = json.loads(capsys.readouterr().out)["analytic"]
    assert analytic["seq"] == seq and analytic["flops_per_token"] * seq == counter.get_total_flops()


@pytest.mark.parametrize("seq,words", [("0", "--seq must be a positive integer"), ("100000", "learned positions")])
def test_summary_seq_the_model_cannot_run_is_a_usage_error(capsys, seq, words):
    folder = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gpt2-tiny")
    assert main(["summary", folder, "--seq", seq]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def saved_vit(tmp_path):
    """A tiny ViTForImageClassification's save_pretrained folder, its config, and its forward FLOPs per image as
    FlopCounterMode counts them."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    from test_families import fcm_image_flops

    cfg = T.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24, image_size=16,
                      patch_size=4, num_labels=5, attn_implementation="eager")
    torch.manual_seed(0)
    model = T.ViTForImageClassification(cfg).eval()
    model.save_pretrained(tmp_path)
    expected = fcm_image_flops(model, 0, 1, "cpu", cfg.image_size, cfg.num_channels, cfg.image_size)
    return tmp_path, cfg, expected


def test_image_model_summary_is_per_image(capsys, saved_vit):
    """An image model's summary and report give FLOPs per image: they said 'FLOPs/token at seq 128', the image's
    FLOPs divided by a length ViT never reads (17 tokens here)."""
    tmp_path, cfg, expected = saved_vit
    for seq in ([], ["--seq", "8"]):
        an = run_json(capsys, str(tmp_path), *seq)["analytic"]
        assert (an["input"], an["image_size"], an["flops_per_token"]) == ("image", cfg.image_size, expected)
    assert main([str(tmp_path)]) == 0
    assert f"input        one {cfg.image_size}x{cfg.image_size} image" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "--no-stats"]) == 0
    assert f"{expected:,} FLOPs per {cfg.image_size}x{cfg.image_size} image" in capsys.readouterr().out


def test_image_model_flops_and_memory_are_per_image(capsys, saved_vit):
    """`flops` and `memory` of an image model say the image their figures are per: they printed `seq 128 (default...)`,
    a table of `seq 128 / tokens 128 / FLOPs/token` and `forward FLOPs at s=128`, a length ViT never reads (its 17
    tokens are the patches); `--seq` changed only the per-token division: now noted as unused, the figures the same."""
    tmp_path, cfg, expected = saved_vit
    side = f"{cfg.image_size}x{cfg.image_size}"
    for command in ("flops", "memory"):
        r = run_json(capsys, command, str(tmp_path))
        assert (r["input"], r["image_size"]) == ("image", cfg.image_size)
        assert main([command, str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert f"input        one {side} image" in out and "seq   " not in out and "FLOPs/token" not in out
        with_seq = run_json(capsys, command, str(tmp_path), "--seq", "8")
        assert any(n.startswith("--seq 8 unused: vit reads images") for n in with_seq["notes"]), with_seq["notes"]
        if command == "flops":
            assert [run["totals"]["flops"] for run in (with_seq["runs"][0], r["runs"][0])] == [expected, expected]
    assert main(["flops", str(tmp_path)]) == 0
    assert f"exact        forward FLOPs per {side} image: {expected:,};" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "--no-stats"]) == 0   # its FLOPs and memory sections too
    out = capsys.readouterr().out
    assert out.count(f"batch 1, one {side} image each") == 2 and "FLOPs per token" not in out and "seq 128" not in out


def test_moe_summary_shows_active_parameters(capsys, tmp_path):
    """A mixture of experts' summary says what one token runs through: `flops`, `memory` and the JSON gave the active
    parameters, the human summary did not. The oracle: the model's parameters less the experts top-k leaves idle."""
    pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    cfg = T.Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=64)
    model = T.Qwen3MoeForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    idle = experts * (cfg.num_experts - cfg.num_experts_per_tok) // cfg.num_experts
    total = model.num_parameters()
    assert main([str(tmp_path)]) == 0
    assert f"active       {total - idle:,} parameters per token (top-k experts; {total:,} in all)" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["llama", "swin", "whisper", "esm"])
@pytest.mark.parametrize("command", ["flops", "memory"])
def test_a_folder_of_a_config_alone_is_that_config(tmp_path, capsys, kind, command):
    """A folder holding config.json and no weights file (a config downloaded alone) answers as the config itself
    (the static path and, for ESM, the meta device's), with a note saying so; transformers writes each config."""
    from transformers import EsmConfig, LlamaConfig, SwinConfig, WhisperConfig
    config = {"llama": lambda: LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, vocab_size=256),
              "swin": lambda: SwinConfig(embed_dim=16, depths=[1, 1], num_heads=[1, 2], image_size=32),
              "whisper": lambda: WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1, vocab_size=128),
              "esm": lambda: EsmConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                       vocab_size=33, pad_token_id=1, mask_token_id=32,
                                       architectures=["EsmForMaskedLM"])}[kind]()
    config.save_pretrained(tmp_path)
    (tmp_path / "README.md").write_text("a model card, no weights")
    alone = run_json(capsys, command, str(tmp_path))
    bare = run_json(capsys, command, str(tmp_path / "config.json"))
    assert sorted(alone["notes"]) == sorted(bare["notes"] + [f"{tmp_path} holds no weights file: from its config.json alone"])
    assert {k: v for k, v in alone.items() if k != "notes"} == {k: v for k, v in bare.items() if k != "notes"}


def test_a_folder_with_weights_or_without_a_model_config_is_unchanged(tmp_path, capsys, cli):
    r = run_json(capsys, "flops", os.path.join(FIX, "gpt2-tiny"))
    assert not any("holds no weights file" in n for n in r["notes"])
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')      # no model_type: not a model's config
    rc, out, err = cli("flops", str(tmp_path))
    assert rc != 0 and out == "" and err.count("\n") == 1 and "folder holds no weights file" in err


def test_a_large_bare_config_is_a_config(tmp_path, capsys):
    """A classifier's config.json with tens of thousands of labels runs to megabytes (ImageNet-21k's 21,841, here
    60,000), its model_type after id2label as transformers sorts the keys: read whole (up to limits' config_bytes),
    it is the config it is (past 4 MB it read as 'not a checkpoint format')."""
    from transformers import SwinConfig
    labels = {i: f"n{i:08d}, a synset's names, long enough for the file to pass four megabytes" for i in range(60_000)}
    SwinConfig(embed_dim=16, depths=[1, 1], num_heads=[1, 2], num_labels=60_000, id2label=labels,
               architectures=["SwinForImageClassification"]).save_pretrained(tmp_path)
    assert os.path.getsize(tmp_path / "config.json") > 4 << 20
    r = run_json(capsys, "flops", str(tmp_path / "config.json"))
    assert r["parameters"]["predicted"] > 60_000 * 16
