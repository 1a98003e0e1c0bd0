"""Weight bytes of classes transformers keeps partly in float32 when loaded in a 16-bit dtype (families/fp32_table.py):
`_keep_in_fp32_modules_strict` under float16 and bfloat16 (DeepSeek-V3's and GLM-4.5 MoE's router `gate.weight`),
`_keep_in_fp32_modules` under float16 only (T5's `wo`, gpt-oss's norms).

The oracle: the bytes of `model.parameters()` after transformers' own `from_pretrained(dir, dtype=...)` of a tiny model
save_pretrained wrote; compared with `ckptstat memory`'s "as configured" line of the bare config.json (dtype in it), its
what-if line of that dtype, the planner's resident weights, and those under `--weights-dtype` for a float32 checkpoint
(tests/test_memory_planner.py: DeepSeek-V3's float32 routers replicated over tensor parallelism)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from conftest import fixture_script  # noqa: E402

fixture_script("make_tie_table")   # before make_fp32_table, which imports it by name
entry = fixture_script("make_fp32_table").entry

from ckptstat.families import fp32_table, tie_table  # noqa: E402

MOE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
           vocab_size=101, max_position_embeddings=256)
CASES = {
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(MOE, n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=2, moe_intermediate_size=32,
                         first_k_dense_replace=1, n_group=2, topk_group=1, q_lora_rank=24, kv_lora_rank=16,
                         qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12)),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                 dict(MOE, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
                      first_k_dense_replace=1, head_dim=16)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(MOE, num_local_experts=4, num_experts_per_tok=2, sliding_window=4, head_dim=16, intermediate_size=32)),
    "t5": ("T5Config", "T5ForConditionalGeneration",
           dict(d_model=64, d_ff=96, num_layers=2, num_heads=4, d_kv=16, vocab_size=101, feed_forward_proj="gated-gelu")),
    "llama": ("LlamaConfig", "LlamaForCausalLM", MOE),   # keeps nothing in float32
    # no op template: the meta path (analysis/meta.py), its embeddings, norms and router linear kept in float32
    "ergo": ("ErgoConfig", "ErgoForCausalLM",
             dict(vocab_size=101, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  first_dense_intermediate_size=96, moe_intermediate_size=32, shared_intermediate_size=32, num_experts=4,
                  num_experts_per_tok=2, sliding_window=4, head_dim=16)),
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _loaded_bytes(path, cls: str, dtype) -> int:
    """Bytes of the parameters transformers holds after from_pretrained(path, dtype=dtype)."""
    model = getattr(T, cls).from_pretrained(str(path), dtype=dtype)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _saved(tmp_path, name: str, dtype) -> str:
    config_cls, cls, sizes = CASES[name]
    cfg = getattr(T, config_cls)(**sizes)
    cfg.architectures = [cls]
    torch.manual_seed(0)
    path = tmp_path / f"{name}-{dtype}".replace("torch.", "")
    getattr(T, cls)._from_config(cfg, dtype=dtype).save_pretrained(str(path))
    # the dtype it was saved in (save_pretrained writes the first parameter's: Ergo's embeddings are float32)
    saved = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(saved, dtype=str(dtype).removeprefix("torch."))))
    return str(path)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_config_alone_weighs_what_from_pretrained_holds(cli, tmp_path, name, dtype):
    path = _saved(tmp_path, name, DTYPES[dtype])
    real = _loaded_bytes(path, CASES[name][1], DTYPES[dtype])
    rc, out, err = cli("memory", f"{path}/config.json", "--gpu-mem", "80GiB", "--json")
    assert rc == 0, err
    r = json.loads(out)
    lines = {(x["group"], x["item"]): x["bytes"] for x in r["lines"]}
    assert lines[("weights", f"as configured ({dtype})")] == real
    assert lines[("weights what-if", dtype)] == real
    assert [x["bytes"] for x in r["fit"]["lines"] if x["group"] == "weights"] == [real]   # the planner's, op by op


@pytest.mark.parametrize("wd, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_weights_dtype_of_a_float32_checkpoint(cli, tmp_path, wd, dtype):
    """A float32 T5 checkpoint planned at --weights-dtype: what from_pretrained(dtype=...) holds (`wo` stays float32
    under float16)."""
    path = _saved(tmp_path, "t5", torch.float32)
    real = _loaded_bytes(path, "T5ForConditionalGeneration", dtype)
    rc, out, err = cli("memory", path, "--weights-dtype", wd, "--gpu-mem", "80GiB", "--json")
    assert rc == 0, err
    resident = [x["bytes"] for x in json.loads(out)["fit"]["lines"] if x["group"] == "weights"]
    assert resident == [real]


def test_table_is_fresh():
    """Written by the installed transformers over the classes the tie table built: an upgrade fails here until
    `python fixtures/make_fp32_table.py` is run again."""
    with open(fp32_table._PATH, encoding="utf-8") as f:
        table = json.load(f)
    with open(tie_table._PATH, encoding="utf-8") as f:
        ties = json.load(f)
    assert table["transformers"] == T.__version__ == ties["transformers"]
    assert table["walked"] == len(ties["classes"])
    assert set(table["classes"]) | set(table["not_built"]) <= set(ties["classes"])


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", [*sorted({c for _, c, _ in CASES.values()}), "Blip2ForConditionalGeneration"])
def test_table_is_what_the_class_keeps(cls):
    assert entry(cls) == dict(fp32_table._table().get(cls, {}))


# T5 v1.1's layout at a size whose linears are whole 128 x 128 FP8 blocks (the FFN's wo among them)
T5_QUANT = dict(d_model=128, d_ff=256, num_layers=2, num_heads=4, d_kv=32, vocab_size=1000, feed_forward_proj="gated-gelu",
                tie_word_embeddings=False)


def _t5_config(tmp_path) -> str:
    cfg = T.T5Config(**T5_QUANT).to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg, architectures=["T5ForConditionalGeneration"], dtype="bfloat16")))
    return str(path)


def _resident(cli, path: str, *args: str) -> int:
    rc, out, err = cli("memory", path, "--gpu-mem", "80GiB", "--json", *args)
    assert rc == 0, err
    return sum(x["bytes"] for x in json.loads(out)["fit"]["lines"] if x["group"] == "weights")


def test_fp8_leaves_what_the_class_keeps_in_float32_unconverted(cli, tmp_path):
    """FineGrainedFP8's quantizer adds `_keep_in_fp32_modules` to the modules it leaves alone (quantizers/base.py
    get_modules_to_not_convert): T5's `wo` stays a 16-bit nn.Linear (tests/test_memory_plan_quant.py's oracle:
    replace_with_fp8_linear on the meta model)."""
    from test_memory_plan_quant import _fp8_oracle

    assert _resident(cli, _t5_config(tmp_path), "--weights-dtype", "fp8") == \
        _fp8_oracle(T.T5Config(**T5_QUANT), T.T5ForConditionalGeneration)


def test_int8_leaves_what_the_class_keeps_in_float32_unconverted(cli, tmp_path):
    """bitsandbytes LLM.int8 (replace_with_bnb_linear) converts the nn.Linear modules transformers' should_convert_module
    allows, given get_modules_to_not_convert(model, None, model._keep_in_fp32_modules): each an int8 weight and an fp32
    scale per row (Int8Params CB, SCB); the rest bf16 (bitsandbytes is not installed here: the selection is
    transformers', the layout the planner's int8 row)."""
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    with torch.device("meta"):
        model = T.T5ForConditionalGeneration._from_config(T.T5Config(**T5_QUANT), dtype=torch.bfloat16)
    skip = HfQuantizer.get_modules_to_not_convert(model, None, model._keep_in_fp32_modules)
    assert "wo" in skip
    converted = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and should_convert_module(n, skip)]
    rest = sum(p.numel() for p in model.parameters()) - sum(m.weight.numel() for m in converted)
    expected = sum(m.weight.numel() + 4 * m.out_features for m in converted) + 2 * rest
    assert _resident(cli, _t5_config(tmp_path), "--weights-dtype", "int8") == expected
