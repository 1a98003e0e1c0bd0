"""Residual additions a decoder layer makes, against transformers' forward: the op templates count them as
element-wise FLOPs and bytes (a norm's "(+residual)", or an explicit "... + residual" add), which FlopCounterMode
does not see, so the oracle here is the forward itself: every aten.add of two hidden-state tensors ([batch, seq,
hidden]) one eager forward of the sample model runs. Dense decoders (their MoE layers also add expert outputs
together, which the templates count elsewhere), the pre-norm, post-norm, sandwich and parallel blocks: LLaMA and its
layouts, Cohere's parallel block (x + attn(ln x) + mlp(ln x): two adds), Phi's and GPT-J's; OPT's post-norm layers, its
MLP's residual added over [b x s, h] rows and its learned positions, [b, s, h], added to the token embeddings."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import meta_model, spec_of  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from ckptstat.families import FAMILIES  # noqa: E402
from ckptstat.families.framework.graph import build  # noqa: E402
from ckptstat.families.framework.layout import layouts_of  # noqa: E402

BATCH, SEQ = 2, 8


def _dense(f) -> bool:
    """A dense layout family (Cohere's, Phi's and GPT-J's parallel blocks among them)."""
    ls = layouts_of(f)
    return ls is not None and all(lay.mlp != "routed" for lay in ls.by_type.values())


CASES = [pytest.param(f, s, name, id=f"{f.name}-{name}-{i}") for f in FAMILIES if _dense(f)
         for i, s in enumerate(f.samples) for name in s.models if name.endswith("ForCausalLM")]


class _HiddenAdds(TorchDispatchMode):
    """Counts aten.add calls whose two operands are tensors of `shape`, or its tokens flattened into rows (OPT's MLP
    residual: [b x s, h]), or [b, s, h] and a position table's [1, s, h] rows broadcast over the batch (GPTBigCode's
    and GPT-Neo's position_ids [1, s])."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shapes, self.count = {shape, (shape[0] * shape[1], shape[2])}, 0
        self.broadcast = {shape, (1,) + shape[1:]}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.add, torch.ops.aten.add_) and len(args) >= 2 and all(
                isinstance(a, torch.Tensor) for a in args[:2]) and (
                (tuple(args[0].shape) == tuple(args[1].shape) and tuple(args[0].shape) in self.shapes)
                or {tuple(args[0].shape), tuple(args[1].shape)} == self.broadcast):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_cases_cover_each_block_kind():
    names = {p.values[0].name for p in CASES}
    assert {"llama", "cohere", "phi", "gptj", "olmo"} <= names


@pytest.mark.parametrize("family,sample,name", CASES)
def test_residual_adds_equal_the_forwards(family, sample, name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    cls = getattr(T, name)
    model = meta_model(cls, cfg, device="cpu")
    h = cfg.get_text_config().hidden_size
    n = SEQ + spec_of(cls, cfg).prefix_tokens   # the stream holds the tokens the model prepends (CPM-Ant's prompt)
    counter = _HiddenAdds((BATCH, n, h))
    ids = torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) % cfg.get_text_config().vocab_size
    with counter, torch.no_grad():
        model(input_ids=ids, use_cache=False)
    ours = 0
    for op in build(spec_of(cls, cfg), BATCH, SEQ):
        if op.module.endswith(" (+residual)"):   # a norm that adds the residual it reads
            ours += op.calls
        elif "residual" in op.module and op.kind != "norm":   # an add of attn (+ mlp) outputs to the stream
            ours += op.calls * op.ew // (BATCH * n * h)
        elif op.module.endswith(" + positions"):   # a position table added to the token embeddings
            ours += op.calls
    assert ours == counter.count, [(op.module, op.calls, op.ew) for op in build(spec_of(cls, cfg), BATCH, SEQ)
                                   if "residual" in op.module]


_TOWER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
_IMAGE = dict(_TOWER, image_size=16, patch_size=4)
_TEXT = dict(_TOWER, vocab_size=99, max_position_embeddings=16)
ENCODERS = [("ViTConfig", "ViTModel", _IMAGE), ("DeiTConfig", "DeiTModel", _IMAGE),
            ("CLIPVisionConfig", "CLIPVisionModel", _IMAGE), ("CLIPTextConfig", "CLIPTextModel", _TEXT),
            ("SiglipVisionConfig", "SiglipVisionModel", _IMAGE), ("SiglipTextConfig", "SiglipTextModel", _TEXT)]


@pytest.mark.parametrize("config,name,kwargs", ENCODERS, ids=[e[1] for e in ENCODERS])
def test_vision_and_text_towers_count_the_adds_their_forward_makes(config, name, kwargs):
    """The ViT-style layers (framework/walk_vision.py: ViT, DeiT, CLIP's and SigLIP's towers) add to the stream twice a
    layer (the attention's output, then the MLP's), and the embeddings add their positions once: the element-wise
    FLOPs of the ops that say so ("residual", "position" in their labels), in units of the stream, equal the
    aten.adds of [batch, tokens, hidden] tensors one eager forward runs."""
    cfg = getattr(T, config)(**kwargs)
    cls = getattr(T, name)
    model = cls(cfg).eval()
    text = "vocab_size" in kwargs
    # the patches, a class token (not SigLIP's) and DeiT's distillation token
    side = None if text else cfg.image_size
    n = SEQ if text else (side // cfg.patch_size) ** 2 + (not name.startswith("Siglip")) + (name == "DeiTModel")
    counter = _HiddenAdds((BATCH, n, cfg.hidden_size))
    inputs = ({"input_ids": torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) % cfg.vocab_size} if text
              else {"pixel_values": torch.zeros(BATCH, cfg.num_channels, side, side)})
    with counter, torch.no_grad():
        model(**inputs)
    stream = BATCH * n * cfg.hidden_size
    ops = build(spec_of(cls, cfg), BATCH, SEQ if text else side)
    ours = sum(op.calls for op in ops if op.kind == "norm" and op.module.endswith(" (+residual)"))
    ours += sum(op.calls * op.ew // stream for op in ops if op.kind != "norm" and op.ew >= stream
                and ("residual" in op.module or "position" in op.module))
    assert ours == counter.count, [(op.module, op.calls, op.ew) for op in ops]
