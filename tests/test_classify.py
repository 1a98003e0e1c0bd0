"""The name classifier on the real name lists of transformers models (built on the meta device).

The oracle is the module tree, not the name rules: each model's embedding / block / pooler modules
are looked up as objects, and every parameter under them must land in their bucket and layer."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ckptstat.naming import classify, classify_all  # noqa: E402

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)


def bert_like(base):
    spec = [(base.embeddings, "embedding", None)]
    if getattr(base, "embeddings_project", None) is not None:  # ELECTRA with embedding_size != hidden
        spec.append((base.embeddings_project, "embedding", None))
    spec += [(m, "encoder", i) for i, m in enumerate(base.encoder.layer)]
    if getattr(base, "pooler", None) is not None:
        spec.append((base.pooler, "pooler", None))
    return spec


def albert(base):
    return ([(base.embeddings, "embedding", None), (base.encoder.embedding_hidden_mapping_in, "embedding", None)]
            + [(m, "encoder", i) for i, m in enumerate(base.encoder.albert_layer_groups)]
            + ([(base.pooler, "pooler", None)] if base.pooler is not None else []))


def distilbert(base):
    return [(base.embeddings, "embedding", None)] + [(m, "encoder", i) for i, m in enumerate(base.transformer.layer)]


def gpt2(base):
    return ([(base.wte, "embedding", None), (base.wpe, "embedding", None), (base.ln_f, "encoder", None)]
            + [(m, "encoder", i) for i, m in enumerate(base.h)])


def llama(base):
    return ([(base.embed_tokens, "embedding", None), (base.norm, "encoder", None)]
            + [(m, "encoder", i) for i, m in enumerate(base.layers)])


def t5(model):
    # transformers 5: the stacks' embed_tokens are modules of their own, tied to shared by weight
    return ([(model.shared, "embedding", None), (model.encoder.embed_tokens, "embedding", None),
             (model.decoder.embed_tokens, "embedding", None), (model.encoder.final_layer_norm, "encoder", None),
             (model.decoder.final_layer_norm, "decoder", None)]
            + [(m, "encoder", i) for i, m in enumerate(model.encoder.block)]
            + [(m, "decoder", i) for i, m in enumerate(model.decoder.block)])


T = transformers
CASES = [
    ("BertModel", lambda: T.BertModel(T.BertConfig(**SMALL)), bert_like),
    ("BertForPreTraining", lambda: T.BertForPreTraining(T.BertConfig(**SMALL)), bert_like),
    ("BertForMaskedLM", lambda: T.BertForMaskedLM(T.BertConfig(**SMALL)), bert_like),
    ("BertForSequenceClassification", lambda: T.BertForSequenceClassification(T.BertConfig(**SMALL)), bert_like),
    ("RobertaForMaskedLM", lambda: T.RobertaForMaskedLM(T.RobertaConfig(**SMALL)), bert_like),
    ("RobertaForQuestionAnswering", lambda: T.RobertaForQuestionAnswering(T.RobertaConfig(**SMALL)), bert_like),
    ("ElectraForPreTraining", lambda: T.ElectraForPreTraining(T.ElectraConfig(embedding_size=16, **SMALL)), bert_like),
    ("ElectraForMaskedLM", lambda: T.ElectraForMaskedLM(T.ElectraConfig(embedding_size=16, **SMALL)), bert_like),
    ("AlbertForPreTraining", lambda: T.AlbertForPreTraining(T.AlbertConfig(embedding_size=16, **SMALL)), albert),
    ("DistilBertForMaskedLM", lambda: T.DistilBertForMaskedLM(T.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99)), distilbert),
    ("GPT2LMHeadModel", lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=99)), gpt2),
    ("LlamaForCausalLM", lambda: T.LlamaForCausalLM(T.LlamaConfig(num_key_value_heads=2, **SMALL)), llama),
    ("MistralForCausalLM", lambda: T.MistralForCausalLM(T.MistralConfig(num_key_value_heads=2, **SMALL)), llama),
    ("Qwen2ForCausalLM", lambda: T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, **SMALL)), llama),
    ("MixtralForCausalLM",
     lambda: T.MixtralForCausalLM(T.MixtralConfig(num_key_value_heads=2, num_local_experts=4, **SMALL)), llama),
    ("T5ForConditionalGeneration", lambda: T.T5ForConditionalGeneration(T.T5Config(
        d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99)), t5),
]


def expected_placements(model, spec):
    names: dict[int, list[str]] = {}
    for n, m in model.named_modules(remove_duplicate=False):  # a shared module has several names
        names.setdefault(id(m), []).append(n)
    prefixes = sorted(((n + ".", b, i) for m, b, i in spec for n in names[id(m)]), key=lambda p: -len(p[0]))
    out = {}
    for name, _ in model.named_parameters(remove_duplicate=False):
        out[name] = next(((b, i) for p, b, i in prefixes if name.startswith(p)), ("cls", None))
    return out


@pytest.mark.parametrize("label,build,spec_of", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("wrapper", ["", "module."])
def test_buckets_layers_roles(label, build, spec_of, wrapper):
    with torch.device("meta"):
        model = build()
    base = model if label.startswith("T5") else model.base_model
    want = expected_placements(model, spec_of(base if not label.startswith("T5") else model))
    params = list(model.named_parameters(remove_duplicate=False))
    buffers = list(model.named_buffers(remove_duplicate=False))
    got = classify_all([(wrapper + n, "F32", tuple(p.shape)) for n, p in params + buffers])
    for name, _ in params:
        p = got[wrapper + name]
        assert (p.bucket, p.layer, p.role) == (*want[name], "parameter"), name
    for name, b in buffers:
        dtype = "I64" if not b.dtype.is_floating_point else "F32"
        assert classify(wrapper + name, dtype, tuple(b.shape)).role == "buffer", name


@pytest.mark.parametrize("name,bucket,layer,role", [
    ("bert.embeddings.position_ids", "embedding", None, "buffer"),
    ("optimizer.state.3.exp_avg", "other", None, "optimizer"),
    ("optimizer.state.3.step", "other", None, "optimizer"),
    ("global_step", "other", None, "counter"),
    ("h.0.attn.bias", "encoder", 0, "buffer"),               # GPT-2's causal mask, rank 4
    ("model.layers.3.self_attn.rotary_emb.inv_freq", "encoder", 3, "buffer"),
    ("bert/encoder/layer_3/attention/self/query/kernel", "encoder", 3, "parameter"),
    ("bert/embeddings/word_embeddings/adam_m", "embedding", None, "optimizer"),
    ("cls/predictions/output_bias", "cls", None, "parameter"),
    ("tf_bert_model/bert/encoder/layer_._1/output/dense/kernel:0", "encoder", 1, "parameter"),
    ("some.adapter.weight", "other", None, "parameter"),
])
def test_rules_on_single_names(name, bucket, layer, role):
    shape = (1, 1, 8, 8) if name.endswith("attn.bias") else (4,)
    p = classify(name, "I64" if name.endswith("position_ids") else "F32", shape)
    assert (p.bucket, p.layer, p.role) == (bucket, layer, role)


def test_decoder_only_stack_is_the_encoder_equivalent():
    got = classify_all([("model.decoder.layers.0.fc1.weight", "F32", (4, 4))])  # OPT naming
    assert got["model.decoder.layers.0.fc1.weight"].bucket == "encoder"
    t5 = classify_all([("encoder.block.0.layer.0.SelfAttention.q.weight", "F32", (4, 4)),
                       ("decoder.block.0.layer.0.SelfAttention.q.weight", "F32", (4, 4))])
    assert [p.bucket for p in t5.values()] == ["encoder", "decoder"]
