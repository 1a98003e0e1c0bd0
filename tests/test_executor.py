"""The optional torch executor on small real models from fixtures/ (CPU)."""
import json
import sys

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ckptstat.executor import build_model, execute  # noqa: E402


@pytest.mark.parametrize("name", ["bert-tiny", "gpt2-tiny", "llama-tiny-sharded"])
def test_measured_flops_match_analytic(name):
    r = execute(fixture(name), batch=2, seq=16, warmup=1, iters=2)
    assert r["outputs_finite"]
    assert r["weights"]["missing"] == []
    assert r["flops"]["measured"] > 0 and r["flops"]["analytic"] is not None
    assert abs(r["flops"]["difference"]) < 0.01, r["flops"]
    assert r["latency"]["median_s"] > 0 and r["peak_memory"]["bytes"] > 0


@pytest.mark.parametrize("name", ["bert-tiny-mlm", "gpt2-tiny"])
def test_weights_loaded_equal_the_file(name):
    ckpt = open_checkpoint(fixture(name))
    model, loaded, missing = build_model(ckpt, "cpu", "fp32", "eager")
    assert missing == [] and loaded
    state = model.state_dict()
    for key in loaded:
        file_name = key if key in ckpt.tensors else key.split(".", 1)[1] if key.split(".", 1)[1] in ckpt.tensors else None
        file_name = file_name or model.base_model_prefix + "." + key
        np.testing.assert_array_equal(state[key].numpy(), ckpt.read(file_name), err_msg=key)


def test_sdpa_on_cpu_warns(cli):
    rc, out, _ = cli("run", fixture("bert-tiny"), "--seq", "8", "--attn", "sdpa", "--iters", "1", "--json")
    r = json.loads(out)
    assert rc == 0 and any("SDPA on CPU" in n for n in r["notes"])


def test_usage_errors(cli):
    rc, _, err = cli("run", fixture("bert-tiny"), "--dtype", "fp8")
    assert rc == 2 and "--dtype" in err
    if not torch.cuda.is_available():
        rc, _, err = cli("run", fixture("bert-tiny"), "--device", "cuda")
        assert rc == 2 and "CUDA" in err


def test_without_torch_says_what_to_install(cli, monkeypatch, expected_st):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    rc, out, err = cli("run", fixture("bert-tiny"))
    assert rc == 1 and out == "" and "pip install 'ckptstat[run]'" in err
    rc, out, _ = cli(fixture("bert-tiny"))  # the rest keeps working
    assert rc == 0 and f"{expected_st['bert-tiny']['parameters']:,}" in out
