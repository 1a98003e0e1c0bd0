"""docs/oracles.md's BERT-base split, reproduced from a real 440 MB save (built here, never committed)."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ckptstat import summarize  # noqa: E402


@pytest.fixture(scope="module")
def bert_base_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert-base")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig())  # bert-base-uncased's config
    model.save_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


def test_bert_base_split(bert_base_dir):
    path, n_params = bert_base_dir
    r = summarize(path)
    assert r["storage"]["file_bytes"] > 430e6
    assert r["parameters"]["unique"] == n_params == 109_482_240
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    assert buckets == {"embedding": 23_837_184, "encoder": 85_054_464, "pooler": 590_592}
    assert len([row for row in r["layers"] if row["bucket"] == "encoder"]) == 12
