"""Every registered model family against transformers builds of it. Each family module carries samples
(base.Sample: a config class with tiny sizes and the model classes to build, one or more per head the
family models); for every sample model:

* the parameters its op template predicts from the config equal sum(p.numel() for p in model.parameters());
* its matmul FLOPs equal what torch.utils.flop_counter.FlopCounterMode counts on an eager forward;
* its tensor-name signature detects it, and inference from the tensor shapes alone (no config) finds
  the same head and parameter count.

A family without samples, or with a head or model_type no sample builds, fails here: a new family
inherits these tests from its registry line. Models are built on torch's meta device (no memory, no
compute) unless a sample needs real values."""
from __future__ import annotations

import contextlib
import inspect

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ckptstat.core import TensorInfo  # noqa: E402
from ckptstat.families import FAMILIES, detect  # noqa: E402
from ckptstat.families.base import Family, Sample  # noqa: E402
from ckptstat.families.graph import build, predict_params  # noqa: E402
from ckptstat.families.spec import from_config, from_tensors  # noqa: E402

SEQS = (8, 16)
BATCH = 2


# ---- the torch oracle (also used by tests/test_flops.py) ----

@contextlib.contextmanager
def meta_autocast():
    """transformers' rotary embedding opens torch.autocast(device_type=x.device.type), which has no
    meta backend; on meta there is nothing to autocast, so make it a no-op there."""
    real = torch.autocast

    def patched(device_type, *a, **k):
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *a, **k)

    torch.autocast = patched
    try:
        yield
    finally:
        torch.autocast = real


def meta_model(cls, cfg, device="meta"):
    """The model with eager attention: on meta (shapes only), or with real tiny weights on the CPU."""
    if device == "meta":
        with torch.device("meta"):
            return cls._from_config(cfg, attn_implementation="eager")
    torch.manual_seed(0)
    return cls._from_config(cfg, attn_implementation="eager").eval()


def fcm_flops(model, seq, batch=1, device="meta", encdec=None):
    """FlopCounterMode's total for one forward of `batch` x `seq` tokens (decoder tokens too when the
    model takes decoder_input_ids)."""
    if encdec is None:
        encdec = "decoder_input_ids" in inspect.signature(model.forward).parameters
    with FlopCounterMode(display=False) as counter, meta_autocast(), torch.device(device), torch.no_grad():
        ids = torch.arange(batch * seq).reshape(batch, seq) % model.config.vocab_size
        kw = {"decoder_input_ids": ids} if encdec else {}
        model(input_ids=ids, attention_mask=torch.ones((batch, seq), dtype=torch.long), **kw)
    return counter.get_total_flops()


def spec_of(cls, cfg):
    """ckptstat's ArchSpec from the config.json save_pretrained would write for `cls`."""
    d = cfg.to_dict()
    d["architectures"] = [cls.__name__]
    return from_config(d)


def ours(spec, seq, batch=1):
    """Matmul FLOPs of the family's op template."""
    return sum(2 * op.macs * op.calls for op in build(spec, batch, seq))


def tensor_infos(model) -> dict[str, TensorInfo]:
    """The model's parameters as a checkpoint's headers would list them: each storage once, under the
    name save_pretrained keeps (tied copies dropped); shapes only."""
    return {n: TensorInfo(n, "F32", tuple(p.shape), "model.safetensors", None, 4 * p.numel(), storage=str(id(p)))
            for n, p in model.named_parameters()}


# ---- the registry walk ----

CASES = [pytest.param(f, sample, name, id=f"{f.name}-{name}" + (f"-{i}" if i else ""))
         for f in FAMILIES for i, sample in enumerate(f.samples) for name in sample.models]


def _config(sample: Sample):
    return getattr(T, sample.config)(**sample.kwargs)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_samples_cover_its_heads_and_model_types(family: Family):
    assert family.samples, f"{family.name}: no Sample to check it against transformers (families/{family.name}.py)"
    heads = {spec_of(getattr(T, name), _config(s)).head for s in family.samples for name in s.models}
    assert set(family.heads) <= heads, f"{family.name}: heads without a sample model: {set(family.heads) - heads}"
    model_types = {getattr(T, s.config).model_type for s in family.samples}
    assert model_types == set(family.model_types), f"{family.name}: model_types without a sample config"


def test_registry_names_and_model_types_are_unique():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))
    model_types = [mt for f in FAMILIES for mt in f.model_types]
    assert len(model_types) == len(set(model_types))


@pytest.mark.parametrize("family,sample,model_name", CASES)
def test_params_and_matmul_flops_equal_transformers(family: Family, sample: Sample, model_name: str):
    cfg = _config(sample)
    cls = getattr(T, model_name)
    model = meta_model(cls, cfg, sample.device)
    spec = spec_of(cls, cfg)
    assert spec.family == family.name
    torch_params = sum(p.numel() for p in model.parameters())
    assert predict_params(spec)["total"] == torch_params
    for seq in SEQS:
        expected = fcm_flops(model, seq, BATCH, sample.device)
        assert expected > 0
        assert ours(spec, seq, BATCH) == expected, seq

    # Without a config: the name signature finds the family, the shapes its head and parameters.
    tensors = tensor_infos(model)
    assert detect(tensors, None).family == family.name
    if not sample.infer:
        return
    inferred = from_tensors(family.name, tensors)
    assert inferred.head == spec.head
    assert predict_params(inferred)["total"] == torch_params
