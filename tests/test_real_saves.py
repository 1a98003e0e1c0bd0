"""Counts and ties on what transformers really saves (issue 15): tiny models of many families and heads,
written by `save_pretrained` (safetensors, tied copies dropped) and by `torch.save(state_dict)` (tied
names sharing storage), each also with `architectures` removed from config.json.

The oracle is the model object: sum(p.numel() for p in model.parameters()), its persistent buffers, and
its real tie groups (parameter names sharing one storage). Nothing here is typed from ckptstat's output.
"""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat import open_checkpoint, summarize  # noqa: E402
from ckptstat.analysis.summary import tensors as tensor_list  # noqa: E402
from ckptstat.analysis.ties import audit  # noqa: E402
from ckptstat.census.ties import find_ties  # noqa: E402

D = dict(vocab_size=97, max_position_embeddings=64)
ENC = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24, **D)
DEC = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=24, **D)
S2S = dict(vocab_size=97, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
           decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, pad_token_id=0, bos_token_id=1,
           eos_token_id=2, decoder_start_token_id=1)

# (id, config class, kwargs, model class)
CASES = [
    ("bert-mlm", "BertConfig", ENC, "BertForMaskedLM"),
    ("bert-pretraining", "BertConfig", ENC, "BertForPreTraining"),
    ("bert-seqcls", "BertConfig", ENC, "BertForSequenceClassification"),
    ("roberta-mlm", "RobertaConfig", ENC, "RobertaForMaskedLM"),
    ("electra-mlm", "ElectraConfig", dict(ENC, embedding_size=8), "ElectraForMaskedLM"),
    ("electra-pretraining", "ElectraConfig", dict(ENC, embedding_size=8), "ElectraForPreTraining"),
    ("albert-mlm", "AlbertConfig", dict(ENC, embedding_size=8), "AlbertForMaskedLM"),
    ("albert-pretraining", "AlbertConfig", dict(ENC, embedding_size=8), "AlbertForPreTraining"),
    ("distilbert-mlm", "DistilBertConfig", dict(vocab_size=97, dim=16, n_layers=2, n_heads=2, hidden_dim=24,
                                                max_position_embeddings=64), "DistilBertForMaskedLM"),
    ("gpt2-lm", "GPT2Config", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=64), "GPT2LMHeadModel"),
    ("llama-untied", "LlamaConfig", DEC, "LlamaForCausalLM"),
    ("llama-tied", "LlamaConfig", dict(DEC, tie_word_embeddings=True), "LlamaForCausalLM"),
    ("qwen2-tied", "Qwen2Config", dict(DEC, tie_word_embeddings=True), "Qwen2ForCausalLM"),
    ("mistral", "MistralConfig", DEC, "MistralForCausalLM"),
    ("mixtral", "MixtralConfig", dict(DEC, num_local_experts=3, num_experts_per_tok=2), "MixtralForCausalLM"),
    ("phi", "PhiConfig", dict(DEC), "PhiForCausalLM"),
    ("t5", "T5Config", dict(vocab_size=97, d_model=16, d_kv=8, d_ff=24, num_layers=1, num_heads=2), "T5ForConditionalGeneration"),
    ("bart", "BartConfig", dict(S2S, max_position_embeddings=64), "BartForConditionalGeneration"),
    ("whisper", "WhisperConfig", dict(S2S, max_source_positions=16, max_target_positions=16, num_mel_bins=8),
     "WhisperForConditionalGeneration"),
    # more families and heads (issue 15's breadth)
    ("bert-qa", "BertConfig", ENC, "BertForQuestionAnswering"),
    ("bert-tokcls", "BertConfig", dict(ENC, num_labels=3), "BertForTokenClassification"),
    ("roberta-seqcls", "RobertaConfig", dict(ENC, num_labels=3), "RobertaForSequenceClassification"),
    ("xlm-roberta-mlm", "XLMRobertaConfig", ENC, "XLMRobertaForMaskedLM"),
    ("albert-seqcls", "AlbertConfig", dict(ENC, embedding_size=8), "AlbertForSequenceClassification"),
    ("distilbert-seqcls", "DistilBertConfig", dict(vocab_size=97, dim=16, n_layers=2, n_heads=2, hidden_dim=24,
                                                   max_position_embeddings=64), "DistilBertForSequenceClassification"),
    ("gpt2-untied", "GPT2Config", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                       tie_word_embeddings=False), "GPT2LMHeadModel"),
    ("gpt2-base", "GPT2Config", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=64), "GPT2Model"),
    # the LM head beside multiple_choice_head (framework/decoder_heads.py); OpenAI GPT's ties the other way round: a
    # tied save keeps lm_head and drops tokens_embed
    ("gpt2-double-heads", "GPT2Config", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=64),
     "GPT2DoubleHeadsModel"),
    ("openai-gpt-double-heads", "OpenAIGPTConfig", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=64),
     "OpenAIGPTDoubleHeadsModel"),
    ("openai-gpt-double-heads-untied", "OpenAIGPTConfig", dict(vocab_size=97, n_embd=16, n_layer=2, n_head=2,
                                                               n_positions=64, tie_word_embeddings=False),
     "OpenAIGPTDoubleHeadsModel"),
    ("qwen3-untied", "Qwen3Config", dict(DEC, head_dim=8), "Qwen3ForCausalLM"),
    ("qwen3-tied", "Qwen3Config", dict(DEC, head_dim=8, tie_word_embeddings=True), "Qwen3ForCausalLM"),
    ("gemma", "GemmaConfig", dict(DEC, head_dim=8), "GemmaForCausalLM"),
    ("gemma2", "Gemma2Config", dict(DEC, head_dim=8, sliding_window=4), "Gemma2ForCausalLM"),
    ("phi3-tied", "Phi3Config", dict(DEC, tie_word_embeddings=True, pad_token_id=0), "Phi3ForCausalLM"),
    ("gptneox", "GPTNeoXConfig", dict(ENC), "GPTNeoXForCausalLM"),
    ("falcon", "FalconConfig", dict(vocab_size=97, hidden_size=16, num_hidden_layers=2, num_attention_heads=2),
     "FalconForCausalLM"),
    ("olmo2", "Olmo2Config", DEC, "Olmo2ForCausalLM"),
    ("qwen2-moe", "Qwen2MoeConfig", dict(DEC, num_experts=3, num_experts_per_tok=2, moe_intermediate_size=8,
                                         shared_expert_intermediate_size=12), "Qwen2MoeForCausalLM"),
    ("mamba", "MambaConfig", dict(vocab_size=97, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2,
                                  conv_kernel=4), "MambaForCausalLM"),
    ("mbart", "MBartConfig", dict(S2S, max_position_embeddings=64), "MBartForConditionalGeneration"),
    # Zamba's shared transformer block: saved under the first hybrid layer only (tied), under each untied
    *((f"zamba{'' if tied else '-untied'}", "ZambaConfig",
       dict(hidden_size=16, num_hidden_layers=5, num_attention_heads=2, num_key_value_heads=1, intermediate_size=24,
            vocab_size=97, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=4, mamba_d_conv=3, n_mamba_heads=2,
            tie_word_embeddings=tied), "ZambaForCausalLM") for tied in (True, False)),
    # Zamba2's two shared blocks alternating over three hybrid layers, each with its adapters: saved under the first
    # two hybrid layers (tied), under each untied
    *((f"zamba2{'' if tied else '-untied'}", "Zamba2Config",
       dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=24, vocab_size=97,
            num_hidden_layers=4, layers_block_type=["hybrid", "mamba", "hybrid", "hybrid"], num_mem_blocks=2, adapter_rank=4,
            mamba_d_state=4, mamba_d_conv=3, n_mamba_heads=2, chunk_size=4, tie_word_embeddings=tied),
       "Zamba2ForCausalLM") for tied in (True, False)),
    # M2M100's sinusoidal position tables are non-persistent buffers: not in the file, not parameters
    ("m2m_100", "M2M100Config", dict(S2S, max_position_embeddings=64), "M2M100ForConditionalGeneration"),
    ("t5-encoder", "T5Config", dict(vocab_size=97, d_model=16, d_kv=8, d_ff=24, num_layers=1, num_heads=2), "T5EncoderModel"),
    ("vit-imgcls", "ViTConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
                                     image_size=16, patch_size=4, num_labels=5), "ViTForImageClassification"),
    ("vit-base", "ViTConfig", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
                                   image_size=16, patch_size=4), "ViTModel"),
    ("clip", "CLIPConfig", dict(text_config=dict(vocab_size=97, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                                 num_attention_heads=2, max_position_embeddings=16),
                                vision_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                                   num_attention_heads=2, image_size=16, patch_size=4),
                                projection_dim=8), "CLIPModel"),
    ("resnet-imgcls", "ResNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                                           num_labels=5), "ResNetForImageClassification"),
    # transformers 5: untied, BART's stacks keep their own embed_tokens beside `shared` (families/bart.py)
    ("bart-untied", "BartConfig", dict(S2S, max_position_embeddings=64, tie_word_embeddings=False),
     "BartForConditionalGeneration"),
    # transformers 5 writes the one-tower models without the text_model. / vision_model. prefix (families/clip.py)
    ("clip-text", "CLIPTextConfig", dict(vocab_size=97, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=16), "CLIPTextModel"),
    ("clip-vision", "CLIPVisionConfig", dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                                             image_size=16, patch_size=4), "CLIPVisionModel"),
    ("siglip-text", "SiglipTextConfig", dict(vocab_size=97, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                             num_attention_heads=2, max_position_embeddings=16), "SiglipTextModel"),
    ("siglip-vision", "SiglipVisionConfig", dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                                 num_attention_heads=2, image_size=16, patch_size=4), "SiglipVisionModel"),
]


def _tie_groups_of_model(model) -> set[frozenset[str]]:
    by_storage: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_storage.setdefault(p.data_ptr(), set()).add(name)
    return {frozenset(g) for g in by_storage.values() if len(g) > 1}


def _tie_groups_reported(path: str) -> set[frozenset[str]]:
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    for t in find_ties(open_checkpoint(path)):
        parent.setdefault(t.alias, t.alias)
        parent.setdefault(t.target, t.target)
        parent[root(t.alias)] = root(t.target)
    groups: dict[str, set[str]] = {}
    for n in parent:
        groups.setdefault(root(n), set()).add(n)
    return {frozenset(g) for g in groups.values()}


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    """id -> (oracle, {variant: path})"""
    out = {}
    torch.manual_seed(0)
    for case, cfg_cls, kw, model_cls in CASES:
        model = getattr(T, model_cls)(getattr(T, cfg_cls)(**kw)).eval()
        root = tmp_path_factory.mktemp(case)
        folder = str(root / "hf")
        model.save_pretrained(folder)
        bare = str(root / "no-architectures")
        model.save_pretrained(bare)
        with open(os.path.join(bare, "config.json")) as f:
            cfg = json.load(f)
        cfg.pop("architectures", None)
        with open(os.path.join(bare, "config.json"), "w") as f:
            json.dump(cfg, f)
        sd = str(root / "sd")
        os.makedirs(sd)
        torch.save(model.state_dict(), os.path.join(sd, "pytorch_model.bin"))
        params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        buffers = sum(b.numel() for n, b in model.state_dict().items() if n not in params)
        oracle = {"params": sum(p.numel() for p in model.parameters()), "buffers": buffers,
                  "ties": _tie_groups_of_model(model)}
        out[case] = (oracle, {"save_pretrained": folder, "no architectures": bare, "torch.save": sd})
    return out


VARIANTS = ["save_pretrained", "no architectures", "torch.save"]

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_parameters_and_buffers(saves, case, variant):
    oracle, paths = saves[case]
    r = summarize(paths[variant])
    assert r["parameters"]["unique"] == oracle["params"]
    buffers = sum(row["elements"] for row in r["non_parameters"] if row["role"] == "buffer")
    assert buffers == oracle["buffers"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_tie_groups(saves, case, variant):
    """With no `architectures`, the head comes from the names (the family's head_rules): BART's
    final_logits_bias and Whisper's `model.`-nested decoder show the LM head whose tied weight
    save_pretrained dropped (families/bart.py, families/whisper.py)."""
    oracle, paths = saves[case]
    assert _tie_groups_reported(paths[variant]) == oracle["ties"]


# --- torch.nn saves (issue 15): BatchNorm running statistics and num_batches_tracked are buffers, a
# hand-built ResNet (torchvision cannot be installed beside torch 2.13 here: its BasicBlock is rebuilt
# from nn.Conv2d / nn.BatchNorm2d with torchvision's attribute names), and a Lightning-style training
# checkpoint whose optimizer state is counted apart. Oracles: model.parameters(), the state_dict's
# non-parameter entries (persistent buffers), and the optimizer's own state_dict.

def _resnet():
    nn = torch.nn

    class BasicBlock(nn.Module):   # torchvision.models.resnet.BasicBlock's layout and names
        def __init__(self, cin: int, cout: int, stride: int = 1):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                               if stride != 1 or cin != cout else None)

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + idt)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
            self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = self.layer2(self.layer1(self.maxpool(self.relu(self.bn1(self.conv1(x))))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet()


def _bn_mlp():
    nn = torch.nn
    return nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8),
                         nn.BatchNorm1d(8, affine=False), nn.Linear(8, 3))


NN_CASES = {"resnet-basicblock": (_resnet, (4, 3, 32, 32)), "batchnorm-mlp": (_bn_mlp, (4, 12))}


@pytest.fixture(scope="module")
def nn_saves(tmp_path_factory):
    """id -> (oracle, {variant: path}): the state_dict after one training step (running statistics
    updated, num_batches_tracked 1), and a Lightning-style checkpoint of it with Adam's state."""
    out = {}
    for case, (build, shape) in NN_CASES.items():
        torch.manual_seed(0)
        model = build().train()
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(*shape)).square().mean().backward()
        opt.step()
        root = tmp_path_factory.mktemp(case)
        sd = model.state_dict()
        torch.save(sd, root / "model.pt")
        # pytorch_lightning's Trainer.save_checkpoint layout (LightningModule attribute `model`)
        torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.4.0",
                    "state_dict": {"model." + k: v for k, v in sd.items()}, "loops": {}, "callbacks": {},
                    "optimizer_states": [opt.state_dict()], "lr_schedulers": [], "hparams_name": "kwargs",
                    "hyper_parameters": {"lr": 1e-3}}, root / "last.ckpt")
        params = {n for n, _ in model.named_parameters()}
        optimizer = sum(v.numel() for s in opt.state_dict()["state"].values() for v in s.values()
                        if isinstance(v, torch.Tensor))
        oracle = {"params": sum(p.numel() for p in model.parameters()),
                  "buffers": sum(v.numel() for n, v in sd.items() if n not in params),
                  "named_buffers": sum(b.numel() for _, b in model.named_buffers()),
                  "optimizer": optimizer, "ties": _tie_groups_of_model(model)}
        out[case] = (oracle, {"torch.save": str(root / "model.pt"), "lightning": str(root / "last.ckpt")})
    return out


@pytest.mark.parametrize("variant", ["torch.save", "lightning"])
@pytest.mark.parametrize("case", sorted(NN_CASES))
def test_nn_parameters_buffers_optimizer(nn_saves, case, variant):
    oracle, paths = nn_saves[case]
    r = summarize(paths[variant])
    roles = {row["role"]: row["elements"] for row in r["non_parameters"]}
    assert r["parameters"]["unique"] == oracle["params"]
    assert roles.get("buffer", 0) == oracle["buffers"] == oracle["named_buffers"]   # all of them persistent
    assert roles.get("optimizer", 0) == (oracle["optimizer"] if variant == "lightning" else 0)
    assert _tie_groups_reported(paths[variant]) == oracle["ties"] == set()
    report = audit(open_checkpoint(paths[variant]))
    rows = {row["convention"].split(" of ")[0]: row["params"] for row in report["counting"]["rows"]}
    assert rows["unique parameters"] == rows["every name counted"] == oracle["params"]


# --- Keras saves (issue 15), written by fixtures/make_keras_corpus.py with TF/Keras; the oracle is what
# Keras counted on the saved model (fixtures/expected_keras_corpus.json). BatchNormalization's moving
# statistics are Keras non-trainable weights: role "non-trainable", outside the unique (torch
# parameters()) count, and in the ties table's "Keras count_params()" row; metric variables are apart.
HERE = os.path.dirname(os.path.abspath(__file__))
KERAS = os.path.join(HERE, "..", "fixtures", "keras-corpus")
with open(os.path.join(HERE, "..", "fixtures", "expected_keras_corpus.json")) as _f:
    KERAS_ORACLE = json.load(_f)
KERAS_CASES = {"k2-bn.h5": "k2-bn.h5", "k3-bn.weights.h5": "k3-bn.weights.h5", "k3-bn.keras": "k3-bn.keras",
               "k2-bn-savedmodel": "k2-bn-savedmodel/variables/variables.index", "k3-bn-ckpt": "k3-bn-ckpt"}


def _roles(r: dict) -> dict[str, int]:
    return {row["role"]: row["elements"] for row in r["non_parameters"]}


@pytest.mark.parametrize("case", sorted(KERAS_CASES))
def test_keras_non_trainable_and_metrics(case):
    oracle, path = KERAS_ORACLE[case], os.path.join(KERAS, KERAS_CASES[case])
    r = summarize(path)
    roles = _roles(r)
    assert r["parameters"]["unique"] == oracle["trainable"]
    assert roles.get("non-trainable", 0) == oracle["non_trainable"] > 0
    assert roles.get("metric", 0) == oracle["metric"]
    # Keras 3 tf.train.Checkpoint: the optimizer's references to the model's variables resolve to them;
    # its own state (iterations, learning_rate, moments) is optimizer.variables
    assert roles.get("optimizer", 0) == oracle.get("optimizer", roles.get("optimizer", 0))
    assert "buffer" not in roles
    rows = {row["convention"]: row for row in audit(open_checkpoint(path))["counting"]["rows"]}
    keras = rows["Keras count_params()"]
    assert keras["params"] == oracle["count_params"] == oracle["trainable"] + oracle["non_trainable"]
    assert "buffers" in keras["equals"] and all("moving" in d["name"] or "vars" in d["name"] for d in keras["differences"])


def test_keras_metric_variables_are_their_own_role():
    path = os.path.join(KERAS, KERAS_CASES["k2-bn-savedmodel"])
    rows = {t["name"]: t["role"] for t in tensor_list(open_checkpoint(path))["tensors"]}
    metric = {n for n, role in rows.items() if role == "metric"}
    assert metric == {n for n in KERAS_ORACLE["k2-bn-savedmodel"]["variables"] if n.startswith("keras_api/metrics/")}


def test_torch_batchnorm_has_no_keras_row(nn_saves):
    _, paths = nn_saves["resnet-basicblock"]
    conventions = [row["convention"] for row in audit(open_checkpoint(paths["torch.save"]))["counting"]["rows"]]
    assert "Keras count_params()" not in conventions


def test_hf_tf_h5_is_read_once():
    """HF TF .h5 lists the embeddings under both the `bert` and `mlm___cls` layer groups (the MLM head
    tracks the embedding layer): one Keras variable, counted once as count_params() does."""
    oracle = KERAS_ORACLE["hf-tf-bert-mlm"]
    ckpt = open_checkpoint(os.path.join(KERAS, "hf-tf-bert-mlm"))
    import h5py

    with h5py.File(ckpt.files[0]) as f:   # weight names listed by more than one layer group
        listed = [w for layer in f.attrs["layer_names"] for w in f[layer].attrs["weight_names"]]
    assert int(ckpt.metadata["h5.weights_listed_twice"]) == len(listed) - len(set(listed)) > 0
    assert len(ckpt) == len(set(listed))
    r = summarize(os.path.join(KERAS, "hf-tf-bert-mlm"))
    assert r["parameters"]["unique"] == oracle["count_params"] == oracle["trainable"]


# --- Hugging Face TF writers (transformers 4.x TF classes' save_pretrained, fixtures/make_keras_corpus.py):
# the oracle is Keras' count_params() split into trainable / non-trainable (BART's final_logits_bias is a
# non-trainable TF weight, a torch buffer), and the class that wrote the file.
HF_TF_CASES = sorted(k for k in KERAS_ORACLE if k.startswith("hf-tf-"))


@pytest.mark.parametrize("case", HF_TF_CASES)
def test_hf_tf_writers(case):
    oracle = KERAS_ORACLE[case]
    r = summarize(os.path.join(KERAS, case))
    assert r["parameters"]["unique"] == oracle["trainable"]
    roles = _roles(r)
    assert roles.get("non-trainable", 0) + roles.get("buffer", 0) == oracle["non_trainable"]
    assert r["resolved"]["model"] == oracle["model"].removeprefix("TF")


# The ties table's `model.parameters()` row on TF files: the file's names are compared with the PyTorch
# class's under transformers' spelling (families.framework.infer.canonical_name), the family's tie rules matched on
# that spelling too (census.ties); TFAlbertMLMHead's own decoder_bias, which AlbertForMaskedLM ties, is
# subtracted. (Keras' count_params() counts that bias: the TF model has 97 more parameters than the torch one.)
@pytest.mark.parametrize("case", HF_TF_CASES)
def test_hf_tf_parameters_row(case):
    """The row equals sum(p.numel() for p in model.parameters()) of the PyTorch class of the same config."""
    folder = os.path.join(KERAS, case)
    cls = getattr(T, KERAS_ORACLE[case]["model"].removeprefix("TF"))
    with torch.device("meta"):
        model = cls(T.AutoConfig.from_pretrained(folder))
    rows = audit(open_checkpoint(folder))["counting"]["rows"]
    row = next(r for r in rows if r["convention"].startswith("model.parameters()"))
    assert row["params"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_ties_and_summary_share_one_resolution(saves, case, variant):
    """Issue 15: one architecture and head resolution (the census's) for the summary, its analytic
    model and `ckptstat ties`; with `architectures` removed the head the names show is the class's."""
    _, paths = saves[case]
    s = summarize(paths[variant])
    t = audit(open_checkpoint(paths[variant]))
    row = next(r for r in t["counting"]["rows"] if r["convention"].startswith("model.parameters()"))
    assert s["resolved"]["model"] == t["rules"]["model"] == row["model"]
    assert row["convention"] == f"model.parameters() of {row['model']}"
    if s["analytic"] and "error" not in s["analytic"]:
        assert s["analytic"]["head"] in (s["resolved"]["model"], s["resolved"]["head"])
    cls = dict((c[0], c[3]) for c in CASES)[case]
    if variant == "save_pretrained" and t["rules"]["available"]:
        assert row["model"] == cls
    if variant == "no architectures" and t["rules"]["available"]:
        from ckptstat.families.framework.base import head_of
        assert s["resolved"]["head"] == head_of([cls], "?")[0]
