"""*ForNextSentencePrediction of the bert family (BERT, ERNIE, Megatron-BERT): the pooled output's
`cls.seq_relationship` alone, the `nsp` head (framework/base.py HEAD_SUFFIXES, encoder.HEAD_RULES, bert.walk).
Before, config.json's class was no known head: the head came from the tensor names as `base`, and `ckptstat ties`'
`model.parameters()` row took the NSP head's 34 parameters off ("in the file; the model has no such parameter").

The oracle is the model transformers builds: `parameters()`, and FlopCounterMode over an eager forward.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import report_rows, tiny_config  # noqa: E402

from ckptstat import open_checkpoint, summarize  # noqa: E402
from ckptstat.analysis.ties import audit  # noqa: E402

CASES = [("BertConfig", "BertForNextSentencePrediction"), ("ErnieConfig", "ErnieForNextSentencePrediction"),
         ("MegatronBertConfig", "MegatronBertForNextSentencePrediction")]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cfg_name,cls", CASES, ids=[c for _, c in CASES])
def test_nsp_head(tmp_path, cli, cfg_name, cls):
    from torch.utils.flop_counter import FlopCounterMode

    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = tiny_config(getattr(T, cfg_name))
    cfg._attn_implementation = "eager"
    model = getattr(T, cls)(cfg).eval()
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(tmp_path / "hf")
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, cfg.vocab_size, (1, 16)))
    report = audit(open_checkpoint(str(tmp_path / "hf")))
    assert (report["rules"]["head"], report["rules"]["model"]) == ("nsp", cls)
    rows = report_rows(report)
    assert rows["unique parameters"] == rows["model.parameters()"] == params
    assert summarize(open_checkpoint(str(tmp_path / "sd.pt")))["resolved"]["head"] == "nsp"   # from the names
    rc, out, _ = cli("flops", str(tmp_path / "hf"), "-b", "1", "-s", "16", "--json")
    flops = json.loads(out)
    assert rc == 0 and flops["parameters"]["predicted"] == params
    assert flops["runs"][0]["totals"]["flops"] == counter.get_total_flops()
