"""`memory --autocast bf16`: the planner's lines against what torch holds when a float32 transformers model runs under
torch.autocast (analysis/memory/autocast.py): the 16-bit weight casts autocast caches and autograd keeps, found as
torch makes them (aten._to_copy of a parameter's storage, still alive when the forward ends), and the bytes autograd
saves in the decoder layers (saved_tensors_hooks), on CPU forwards under torch.autocast("cpu", dtype=torch.bfloat16)."""
from __future__ import annotations

import json
import weakref

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from conftest import saved_split  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

_SMALL = dict(vocab_size=100, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2)
_FALCON = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, hidden_dropout=0.0,
               attention_dropout=0.0)


class Casts(TorchDispatchMode):
    """Every cast of a parameter's storage torch makes (aten._to_copy): its output, weakly, to count those alive."""

    def __init__(self, model):
        super().__init__()
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.made: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and args[0].untyped_storage().data_ptr() in self.params:
            self.made.append(weakref.ref(out))
        return out

    def alive(self) -> dict[int, int]:
        """{storage pointer: bytes} of the casts still alive."""
        return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for r in self.made if (t := r()) is not None}


def _model(config_cls, model_cls, sizes, attn):
    torch.manual_seed(0)
    cfg = getattr(T, config_cls)(**sizes)
    return cfg, getattr(T, model_cls)._from_config(cfg, attn_implementation=attn, dtype=torch.float32)


def _training(model, b, n, dtype=torch.bfloat16) -> tuple[int, int]:
    """(bytes of the parameter casts alive at the forward's end, bytes autograd saves inside the decoder layers besides
    them: conftest.saved_split) over one training forward under autocast to `dtype`."""
    model.train()
    ids = torch.randint(0, 90, (b, n))
    casts = Casts(model)
    held: dict[int, int] = {}

    def forward() -> set[int]:
        with casts:
            with torch.autocast("cpu", dtype=dtype):
                assert model(input_ids=ids, labels=ids).loss is not None
                held.update(casts.alive())   # at the forward's end: the region's cache and what autograd keeps
            kept = casts.alive()   # after the region: what autograd keeps, the weights' (no bias's: its grad needs none)
        assert kept and set(kept) <= set(held)
        return set(held)

    layers, _ = saved_split(model, forward)
    return sum(held.values()), layers


def _plan(cli, tmp_path, cfg, model_cls, *args, autocast="bf16") -> dict[tuple[str, str], dict]:
    d = cfg.to_dict()
    d.update(architectures=[model_cls], torch_dtype="float32")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    rc, out, err = cli("memory", str(path), "--autocast", autocast, *args, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["plan"]["weights_dtype"] == "fp32" and r["plan"]["autocast"] == autocast
    if "training" in args:   # the reference lines' training activations (eager attention) under autocast too
        assert all("autocast" in x["rule"] for x in r["lines"]
                   if x["group"] == "activations (training)" and " layers, " in x["item"])
    return {(x["group"], x["item"]): x for x in r["fit"]["lines"]}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("config_cls,model_cls,sizes,attn,b,n", [
    ("LlamaConfig", "LlamaForCausalLM", _SMALL, "sdpa", 2, 16),
    ("LlamaConfig", "LlamaForCausalLM", _SMALL, "eager", 2, 16),
    ("LlamaConfig", "LlamaForCausalLM", dict(_SMALL, tie_word_embeddings=True), "sdpa", 3, 24),   # the head's cast
    ("Qwen2Config", "Qwen2ForCausalLM", _SMALL, "sdpa", 2, 24),   # biased q/k/v
    ("Qwen3Config", "Qwen3ForCausalLM", dict(_SMALL, head_dim=24), "eager", 2, 16),   # q/k norms
    ("MistralConfig", "MistralForCausalLM", dict(_SMALL, sliding_window=8), "sdpa", 2, 32),   # the window's mask
    ("Gemma2Config", "Gemma2ForCausalLM", dict(_SMALL, head_dim=24), "eager", 2, 16),   # soft-capping, 4 norms
    ("Phi3Config", "Phi3ForCausalLM", dict(_SMALL, pad_token_id=0), "sdpa", 2, 16),   # fused qkv
    ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=100, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                                           embd_pdrop=0.0, attn_pdrop=0.0), "eager", 2, 16),   # softmax in its input's dtype
    ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(vocab_size=100, hidden_size=64, intermediate_size=160,
                                                 num_hidden_layers=2, num_attention_heads=4, hidden_dropout=0.0,
                                                 attention_dropout=0.0), "sdpa", 2, 16),   # parallel residual
    ("OPTConfig", "OPTForCausalLM", dict(vocab_size=100, hidden_size=64, ffn_dim=160, num_hidden_layers=2,
                                         num_attention_heads=4, dropout=0.0), "eager", 2, 16),   # relu, LayerNorm, biases
    ("MixtralConfig", "MixtralForCausalLM", dict(_SMALL, num_local_experts=4, num_experts_per_tok=2), "sdpa", 2, 16),
    ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(_SMALL, moe_intermediate_size=48, num_experts=4, num_experts_per_tok=2,
                                                   head_dim=16), "eager", 2, 16),
    ("OlmoeConfig", "OlmoeForCausalLM", dict(_SMALL, intermediate_size=40, num_experts=8, num_experts_per_tok=3), "sdpa", 3,
     24),
    ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(_SMALL, moe_intermediate_size=48, shared_expert_intermediate_size=96,
                                                   num_experts=4, num_experts_per_tok=2), "sdpa", 2, 16),   # shared expert
    ("PhiConfig", "PhiForCausalLM", dict(vocab_size=100, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                         num_attention_heads=4, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
     "sdpa", 2, 16),   # a parallel layer
    ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(_SMALL, head_dim=16, sliding_window=8), "eager", 2, 16),
    ("GraniteConfig", "GraniteForCausalLM", _SMALL, "sdpa", 2, 16),
    # Falcon: SDPA always gets a mask, so k and v are repeated; multi-query k is float32 after the rotary (its cast a
    # copy at every head), ALiBi's mask one per head
    ("FalconConfig", "FalconForCausalLM", _FALCON, "sdpa", 2, 16),
    ("FalconConfig", "FalconForCausalLM", dict(_FALCON, alibi=True, multi_query=False, parallel_attn=False),
     "sdpa", 2, 16),
    ("FalconConfig", "FalconForCausalLM", dict(_FALCON, new_decoder_architecture=True, num_kv_heads=2), "sdpa", 2, 24),
])
def test_training_casts_and_layers_are_what_torch_holds(tmp_path, cli, config_cls, model_cls, sizes, attn, b, n):
    cfg, model = _model(config_cls, model_cls, sizes, attn)
    casts, layers = _training(model, b, n)
    lines = _plan(cli, tmp_path, cfg, model_cls, "--mode", "training", "-b", str(b), "-s", str(n), "--attention",
                  "eager" if attn == "eager" else "flash")
    assert lines[("weights", "bf16 casts (autocast)")]["bytes"] == casts
    assert lines[("weights", "resident")]["bytes"] == sum(p.numel() * p.element_size() for p in model.parameters())
    assert ("master weights", "fp32") not in lines   # the weights are the float32 copy
    line = next(x for k, x in lines.items() if k[0] == "activations" and " layers, " in k[1])
    assert "autocast" in line["rule"]
    assert 0.99 * layers <= line["bytes"] <= 1.03 * layers, (line["bytes"], layers, line["bytes"] / layers)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("config_cls,model_cls,sizes,attn", [
    ("LlamaConfig", "LlamaForCausalLM", _SMALL, "sdpa"),
    ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=100, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                                           embd_pdrop=0.0, attn_pdrop=0.0), "eager"),
])
def test_fp16_autocast_holds_what_bf16_does(tmp_path, cli, config_cls, model_cls, sizes, attn):
    cfg, model = _model(config_cls, model_cls, sizes, attn)
    casts, layers = _training(model, 2, 16, torch.float16)
    lines = _plan(cli, tmp_path, cfg, model_cls, "--mode", "training", "-b", "2", "-s", "16", "--attention",
                  "eager" if attn == "eager" else "flash", autocast="fp16")
    assert lines[("weights", "fp16 casts (autocast)")]["bytes"] == casts
    line = next(x for k, x in lines.items() if k[0] == "activations" and " layers, " in k[1])
    assert 0.99 * layers <= line["bytes"] <= 1.03 * layers, (line["bytes"], layers, line["bytes"] / layers)


@pytest.mark.filterwarnings("ignore")
def test_inference_is_refused_for_what_it_holds_differs_by_model():
    """Why --mode inference is refused with --autocast (autocast.check): under no_grad the cache still keeps every
    parameter's cast until the region ends, but the KV cache's dtypes depend on the model, Llama's keys float32 (after
    the rotary), GPT-2's 16-bit."""
    dtypes = {}
    for config_cls, model_cls, sizes in (("LlamaConfig", "LlamaForCausalLM", _SMALL),
                                         ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=100, n_embd=64, n_layer=2,
                                                                                n_head=4))):
        _, model = _model(config_cls, model_cls, sizes, "sdpa")
        casts = Casts(model.eval())
        with casts, torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            layer = model(input_ids=torch.randint(0, 90, (1, 8)), use_cache=True).past_key_values.layers[0]
            assert sum(casts.alive().values()) > 0
        dtypes[model_cls] = (layer.keys.dtype, layer.values.dtype)
    assert dtypes == {"LlamaForCausalLM": (torch.float32, torch.bfloat16),
                      "GPT2LMHeadModel": (torch.bfloat16, torch.bfloat16)}


@pytest.mark.parametrize("args,why", [
    (("--autocast", "bf16", "--mode", "training", "--weights-dtype", "bf16"), "--autocast casts float32 weights"),
    (("--autocast", "int8", "--mode", "training"), "--autocast must be bf16 or fp16"),
    (("--autocast", "bf16"), "--autocast plans training"),
    (("--autocast", "bf16", "--mode", "training", "--zero", "3", "--gpus", "2"), "ZeRO-3"),
])
def test_settings_it_does_not_model_are_refused(cli, tmp_path, args, why):
    d = T.LlamaConfig(**_SMALL).to_dict()
    d.update(architectures=["LlamaForCausalLM"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    rc, out, err = cli("memory", str(path), *args)
    assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (rc, err)


def test_an_h200_autocast_run_is_planned_at_its_forward_and_backward_peaks(tmp_path, cli):
    """bench/gpu_memory.py's Llama-3.2-1B training under torch.autocast(bfloat16) on an H200 (float32 weights, SDPA,
    b=4, s=1024, the second AdamW step; bench/results/gpu_memory.json): torch.cuda.max_memory_allocated over the
    weights at the forward's end and at backward's start is the AdamW state, autocast's casts, the saved layers, the
    head's non-logit terms and the logits' b*s*V*(2 + 8) B (12 at backward's start: the rule of
    test_memory_planner's GPU note), within 1% (gradients are allocated after those moments: the planner's total
    adds them on the safe side)."""
    import importlib.util
    import os

    bench = os.path.join(os.path.dirname(__file__), "..", "bench")
    with open(os.path.join(bench, "results", "gpu_memory.json")) as f:
        case = next(c for c in json.load(f)["cases"] if c["model"] == "Llama-3.2-1B" and c["options"].get("autocast"))
    spec = importlib.util.spec_from_file_location("published_configs", os.path.join(bench, "published_configs.py"))
    configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(configs)
    config_cls, model_cls, _, sizes = configs.MODELS["Llama-3.2-1B"]
    lines = _plan(cli, tmp_path, getattr(T, config_cls)(**sizes), model_cls, "--mode", "training", "-b",
                  str(case["batch"]), "-s", str(case["seq"]), "--attention", "flash", "--reserve", "0")
    logits = case["batch"] * case["seq"] * sizes["vocab_size"]
    held = (lines[("optimizer state", "adam")]["bytes"] + lines[("weights", "bf16 casts (autocast)")]["bytes"]
            + next(x["bytes"] for k, x in lines.items() if " layers, " in k[1])
            + lines[("activations", "logits and loss")]["bytes"] - 12 * logits)
    assert abs(held + 10 * logits - case["forward_peak"]) <= 0.01 * case["forward_peak"]
    assert abs(held + 12 * logits - case["backward_peak"]) <= 0.01 * case["backward_peak"]


@pytest.mark.parametrize("config_cls,model_cls,sizes", [
    ("DbrxConfig", "DbrxForCausalLM", dict(d_model=64, n_heads=4, n_layers=2, vocab_size=100,
                                           ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
                                           attn_config={"kv_n_heads": 2})),
    ("Llama4TextConfig", "Llama4ForCausalLM", dict(vocab_size=100, hidden_size=64, intermediate_size=64,
                                                   intermediate_size_mlp=128, num_hidden_layers=2, num_attention_heads=4,
                                                   num_key_value_heads=2, head_dim=16, num_local_experts=4)),
])
def test_experts_outside_grouped_mm_are_refused(cli, tmp_path, config_cls, model_cls, sizes):
    """DBRX loops over its flat experts, Llama 4 runs every expert as one bmm: what autocast casts there is not
    measured."""
    d = getattr(T, config_cls)(**sizes).to_dict()
    d.update(architectures=[model_cls])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    rc, out, err = cli("memory", str(path), "--autocast", "bf16", "--mode", "training")
    assert rc == 2 and "routed experts" in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert cli("memory", str(path), "--weights-dtype", "bf16", "--mode", "training")[0] == 0


@pytest.mark.filterwarnings("ignore")
def test_checkpointing_keeps_the_float32_layer_inputs(tmp_path, cli):
    """Under activation checkpointing each decoder layer keeps its input, the residual stream, float32 under
    autocast: the storages torch saves that are what the layers received."""
    cfg, model = _model("LlamaConfig", "LlamaForCausalLM", dict(_SMALL, num_hidden_layers=4), "sdpa")
    model.train()
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    inputs, saved, held = {}, {}, []   # held: no storage freed meanwhile gives its pointer to another
    hooks = [layer.register_forward_pre_hook(
        lambda m, a, k: inputs.update({(a[0] if a else k["hidden_states"]).untyped_storage().data_ptr(): m}),
        with_kwargs=True) for layer in model.model.layers]

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), t.dtype)
        held.append(t)
        return t

    ids = torch.randint(0, 90, (2, 16))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids)
    finally:
        for h in hooks:
            h.remove()
    kept = [saved[p] for p in inputs if p in saved]
    assert len(kept) == 4 and {d for _, d in kept} == {torch.float32}
    lines = _plan(cli, tmp_path, cfg, "LlamaForCausalLM", "--mode", "training", "-b", "2", "-s", "16", "--attention",
                  "flash", "--checkpointing")
    assert lines[("activations", "4 layer inputs")]["bytes"] == sum(nb for nb, _ in kept)
