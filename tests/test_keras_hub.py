"""KerasHub presets and Keras 3 sharded weights (ckptstat/formats/keras_hub.py, registry's `*.weights.json`;
docs/keras_hub.md): fixtures written by keras 3.15 and keras_hub 0.32 themselves (fixtures/make_keras_hub.py), whose
oracle is what h5py lists in the files and what keras / keras_hub rebuild from the folder (count_params(), every
variable's values)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
from conftest import fixture
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.audit.find import discover
from ckptstat.analysis.scan import scan_path
from ckptstat.core import dtypes
from ckptstat.errors import CheckpointError, ExternalReferenceError
from ckptstat.formats import keras_hub as keras_hub_format

with open(fixture("expected_keras_hub.json")) as f:
    EXPECTED = json.load(f)
CASES = sorted(k for k, v in EXPECTED.items() if isinstance(v, dict) and "datasets" in v)
ARCHIVES = sorted(k for k in EXPECTED if k.startswith("archive/"))
TASK = "task.weights.h5"


def _ours(dataset: str) -> str:
    """A dataset h5py listed (`file:path`) by the name ckptstat gives it: the task's under `task/`."""
    file, path = dataset.split(":", 1)
    return f"task/{path}" if file == TASK else path


def _digest(ck, name: str) -> str:
    return hashlib.sha256(np.asarray(ck.read(name)).astype("<f8").tobytes()).hexdigest()


def _folder(case: str) -> str:
    return fixture(EXPECTED[case]["path"])


@pytest.mark.parametrize("case", CASES)
def test_every_dataset_and_value_is_what_keras_rebuilds(case):
    rec = EXPECTED[case]
    with open_checkpoint(_folder(case)) as ck:
        assert sorted(ck.tensors) == sorted(_ours(d) for d in rec["datasets"])
        for dataset, d in rec["datasets"].items():
            t = ck[_ours(dataset)]
            assert list(t.shape) == d["shape"], dataset
            assert t.dtype == ("BF16" if d["dtype"] == "bfloat16" else dtypes.NUMPY_NAMES[d["dtype"]]), dataset
        model = [n for n in ck.tensors if "optimizer/" not in n]
        assert sorted([list(ck[n].shape), _digest(ck, n)] for n in model) == sorted(rec["values"])
        if "optimizer_values" in rec:
            optimizer = [n for n in ck.tensors if n.startswith("optimizer/")]
            assert sorted([list(ck[n].shape), _digest(ck, n)] for n in optimizer) == sorted(rec["optimizer_values"])
        if "shards" in rec:
            assert ck.format == "keras-h5 (sharded)"
            shards = [os.path.basename(f) for f in ck.files if f.endswith(".h5") and not f.endswith(TASK)]
            assert sorted(shards) == rec["shards"]


@pytest.mark.parametrize("case", CASES)
def test_counts_as_keras_does(case):
    rec = EXPECTED[case]
    report = summarize(_folder(case))
    statistics = sum(r["elements"] for r in report["non_parameters"] if r["role"] == "non-trainable")
    assert report["parameters"]["unique"] + statistics == rec["count_params"]   # (keras counts BatchNorm's statistics)
    optimizer = [r for r in report["non_parameters"] if r["role"] == "optimizer"]
    assert sum(r["tensors"] for r in optimizer) == rec["optimizer_variables"]


@pytest.mark.parametrize("case", [c for c in CASES if "backbone_count_params" in EXPECTED[c]])
def test_a_preset_is_described_from_its_own_records(case):
    rec = EXPECTED[case]
    with open(os.path.join(_folder(case), "config.json")) as f:
        config = json.load(f)
    report = summarize(_folder(case))
    meta = report["metadata"]
    assert meta["keras.class_name"] == config["class_name"] and meta["keras.registered_name"] == config["registered_name"]
    assert meta["keras.parameter_count"] == str(rec["backbone_count_params"])
    assert meta["keras.keras_hub_version"] == EXPECTED["keras_hub"]
    notes = " ".join(report["notes"])
    assert f"KerasHub {EXPECTED['keras_hub']} config of a {config['class_name']}, " in notes
    assert f"parameter_count {rec['backbone_count_params']:,} (the backbone's count_params()), equal to" in notes
    # the backbone alone, as Backbone.from_preset reads it: its weights file, opened by name
    weights = next(n for n in ("model.weights.h5", "model.weights.json") if os.path.exists(os.path.join(_folder(case), n)))
    alone = summarize(os.path.join(_folder(case), weights))
    assert alone["parameters"]["unique"] == rec["backbone_count_params"]
    assert alone["metadata"]["keras.class_name"] == config["class_name"]


def test_a_task_preset_reads_its_head_beside_the_backbone():
    rec = EXPECTED["bert-classifier"]
    report = summarize(_folder("bert-classifier"))
    assert report["metadata"]["keras.task_class_name"] == "BertTextClassifier"
    assert any(f"{TASK} (the task's own weights" in n for n in report["notes"])
    head = summarize(os.path.join(_folder("bert-classifier"), TASK))   # the head alone: no parameter_count check
    assert head["parameters"]["unique"] == rec["count_params"] - rec["backbone_count_params"]
    assert not any("parameter_count" in n for n in head["notes"])


def test_the_file_and_its_folder_agree(cli):
    folder = _folder("keras-sharded")
    by_index = open_checkpoint(os.path.join(folder, "model.weights.json"))
    by_folder = open_checkpoint(folder)
    assert list(by_index.tensors) == list(by_folder.tensors)
    assert by_index.metadata["index.total_size"] == by_folder.metadata["index.total_size"]
    assert float(by_index.metadata["index.total_size"]) == sum(t.nbytes for t in by_index)   # Keras sums them
    for command in ("summary", "tensors", "stats"):
        rc, out, err = cli(command, folder)
        assert rc == 0 and not err, (command, err)
    rc, out, err = cli("diff", folder, os.path.join(folder, "model.weights.json"))
    assert rc == 0, err


def test_a_layer_whose_variables_span_shards_is_read_whole():
    rec = EXPECTED["keras-sharded"]
    assert rec["groups_in_several_shards"]
    with open_checkpoint(_folder("keras-sharded")) as ck:
        for group in rec["groups_in_several_shards"]:
            names = [n for n in ck.tensors if n.rpartition("/")[0] == group.strip("/")]
            assert len({ck[n].file for n in names}) > 1, group


def test_shards_without_their_index_are_not_picked_silently(tmp_path, cli):
    for n in os.listdir(_folder("keras-sharded")):
        if n.endswith(".h5"):
            shutil.copy(os.path.join(_folder("keras-sharded"), n), tmp_path / n)
    rc, out, err = cli("summary", str(tmp_path))
    assert rc == 2 and "Keras *.weights.json" in err and "Traceback" not in err


# --- hostile indexes ---------------------------------------------------------------------------------------------

def _copy(tmp_path, case: str = "keras-sharded"):
    dst = tmp_path / "m"
    shutil.copytree(_folder(case), dst)
    return dst


def _rewrite(folder, edit) -> str:
    p = folder / "model.weights.json"
    index = json.loads(p.read_text())
    edit(index)
    p.write_text(json.dumps(index))
    return str(p)


@pytest.mark.parametrize("edit, says", [
    (lambda i: i["weight_map"].update({"/layers/dense/vars": ["../outside.weights.h5"]}), "is not a file name"),
    (lambda i: i["weight_map"].update({"/layers/dense/vars": "/etc/passwd"}), "is not a file name"),
    (lambda i: i["weight_map"].update({"/layers/dense/vars": [3]}), "not a shard file name"),
    (lambda i: i["weight_map"].update({"/layers/dense/vars": {"a": 1}}), "not a shard file name"),
    (lambda i: i["weight_map"].update({"/layers/dense/vars": ["model_00009.weights.h5"]}), "is missing"),
    (lambda i: i["weight_map"].update({"/layers/nothing/vars": "model_00000.weights.h5"}), "variable group(s) here that"),
    (lambda i: i.update({"weight_map": ["model_00000.weights.h5"]}), "no weight_map"),
    (lambda i: i.pop("weight_map"), "no weight_map"),
    (lambda i: i["weight_map"].clear(), "lists no tensors"),
])
def test_a_hostile_index_is_one_line(tmp_path, cli, edit, says):
    index = _rewrite(_copy(tmp_path), edit)
    with pytest.raises(CheckpointError, match="model"):
        open_checkpoint(index)
    rc, out, err = cli("summary", index)
    assert rc != 0 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_variable_in_two_shards_is_refused(tmp_path, cli):
    import h5py

    folder = _copy(tmp_path)
    with open_checkpoint(str(folder)) as ck:
        home = os.path.basename(ck["layers/dense_1/vars/0"].file)
    other = next(n for n in sorted(os.listdir(folder)) if n.endswith(".h5") and n != home)
    with h5py.File(folder / home, "r") as src, h5py.File(folder / other, "a") as dst:
        src.copy("layers/dense_1/vars/0", dst.require_group("layers/dense_1/vars"), "0")   # a second copy elsewhere
    rc, out, err = cli("summary", str(folder))
    assert rc != 0 and "tensor 'layers/dense_1/vars/0' also appears in another shard" in err, err


def test_a_shard_linked_out_of_the_folder_is_refused(tmp_path, cli):
    folder = _copy(tmp_path)
    outside = tmp_path / "elsewhere.h5"
    os.replace(folder / "model_00001.weights.h5", outside)
    os.symlink(outside, folder / "model_00001.weights.h5")
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(str(folder))
    rc, out, err = cli("summary", str(folder))
    assert rc != 0 and "outside the checkpoint" in err


def test_a_huge_index_is_refused_before_it_is_read(tmp_path, cli):
    folder = _copy(tmp_path)
    with open(folder / "model.weights.json", "w") as f:
        f.write('{"weight_map": {' + ", ".join(f'"/l{i}/vars": "model_00000.weights.h5"' for i in range(2000)) + "}}")
    rc, out, err = cli("--limit", "index_bytes=1000", "summary", str(folder))
    assert rc != 0 and "more than the 1,000" in err


# --- a preset's own records ----------------------------------------------------------------------------------------

def test_a_parameter_count_that_disagrees_is_said(tmp_path):
    folder = _copy(tmp_path, "gemma-bf16")
    meta = json.loads((folder / "metadata.json").read_text())
    meta["parameter_count"] += 1
    (folder / "metadata.json").write_text(json.dumps(meta))
    notes = " ".join(summarize(str(folder))["notes"])
    assert f"parameter_count {meta['parameter_count']:,}" in notes and "NOT equal to the" in notes


@pytest.mark.parametrize("bad", [b"{not json", b"[1, 2]", None])
def test_a_broken_or_outside_metadata_is_noted_and_the_weights_still_answer(tmp_path, bad):
    folder = _copy(tmp_path, "gemma-bf16")
    if bad is None:
        os.replace(folder / "metadata.json", tmp_path / "metadata.json")
        os.symlink(tmp_path / "metadata.json", folder / "metadata.json")
    else:
        (folder / "metadata.json").write_bytes(bad)
    report = summarize(str(folder))
    assert report["parameters"]["unique"] == EXPECTED["gemma-bf16"]["count_params"]
    assert "keras.parameter_count" not in report["metadata"]
    if bad != b"[1, 2]":
        assert any("metadata" in n and "ignored" in n for n in report["notes"])


def test_a_transformers_config_beside_keras_weights_is_still_a_config(tmp_path):
    folder = _copy(tmp_path, "gemma-bf16")
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma", "class_name": "x", "config": {},
                                                    "module": "y"}))
    report = summarize(str(folder))
    assert report["config"] is not None and "keras.class_name" not in report["metadata"]


# --- audit and scan ------------------------------------------------------------------------------------------------

def test_audit_takes_a_sharded_index_as_one_unit_with_its_shards():
    units, _ = discover(fixture("keras-sharded"))
    assert [os.path.basename(u.path) for u in units] == ["model.weights.json"]
    assert sorted(os.path.basename(f) for f in units[0].files) == ["model.weights.json", *EXPECTED["keras-sharded"]["shards"]]


def test_scan_of_a_clean_preset_reports_only_its_weights():
    report = scan_path(_folder("bert-classifier"))
    assert {os.path.basename(r["path"]) for r in report["files"]} == {
        "task.weights.h5", *EXPECTED["bert-classifier"]["shards"]}
    assert all(r["status"] == "safe" for r in report["files"])


@pytest.mark.parametrize("name", ["config.json", "task.json"])
@pytest.mark.parametrize("planted, status", [
    ({"module": "os", "class_name": "system", "config": {}}, "unsafe"),
    ({"module": "keras.layers", "class_name": "Lambda", "config": {"function": {"class_name": "__lambda__",
                                                                                  "config": {"code": "4wEA"}}}}, "unsafe"),
    ({"module": "my_layers", "class_name": "Custom", "config": {}}, "unknown"),
])
def test_scan_judges_a_preset_config_by_keras_rules(tmp_path, name, planted, status):
    folder = _copy(tmp_path, "bert-classifier")
    config = json.loads((folder / name).read_text())
    config["config"]["planted"] = planted
    (folder / name).write_text(json.dumps(config))
    report = scan_path(str(folder))
    judged = [r for r in report["files"] if os.path.basename(r["path"]) == name]
    assert judged and judged[0]["status"] == status, judged
    assert "keras_hub's from_preset" in judged[0]["torch_load"] and judged[0]["format"] == f"KerasHub {name}"


# --- a preset's config read as the transformers config keras_hub converted it from -----------------------------------

CONVERTED = sorted(k for k in CASES if k.startswith("converted/"))


def _flat(cfg: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in cfg.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.mark.parametrize("case", CONVERTED)
def test_a_converted_preset_answers_as_the_transformers_model_it_came_from(case):
    from coverage_walk import ours

    want = EXPECTED[case]["transformers"]
    by, flops, cache, params, _ = ours(want["task"], _folder(case))
    assert (by, flops, cache, params) == ("static", want["flops"], want["cache_bytes"], want["num_parameters"])
    report = summarize(_folder(case))
    assert report["parameters"]["unique"] == want["num_parameters"] == EXPECTED[case]["count_params"]
    assert report["resolved"]["model"] == want["class"] and report["config"].endswith("config.json")


@pytest.mark.parametrize("case", CONVERTED)
def test_each_key_read_back_is_the_one_transformers_saved(case):
    saved = _flat(EXPECTED[case]["transformers"]["config"])
    with open_checkpoint(_folder(case)) as ck:
        read = _flat(ck.config)
    assert read.pop("architectures") == [EXPECTED[case]["transformers"]["class"]]
    assert read and {k: saved.get(k) for k in read} == read


def test_the_table_is_the_fixtures_keras_hub():
    with open(os.path.join(os.path.dirname(keras_hub_format.__file__), "keras_hub_configs.json")) as f:
        written_by = json.load(f)["written_by"]
    assert f"keras_hub {EXPECTED['keras_hub']}" in written_by
    assert {c.split("/")[1].removesuffix("-tied") for c in CONVERTED} == set(keras_hub_format._table()["model_types"])


def _with_config(tmp_path, case: str, edit) -> str:
    folder = _copy(tmp_path, case)
    config = json.loads((folder / "config.json").read_text())
    edit(config["config"])
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_model_types_sharing_a_backbone_are_told_apart_by_the_importers_constants(tmp_path):
    assert summarize(_folder("gemma-bf16"))["resolved"]["model"] == "GemmaForCausalLM"   # KerasHub's own Gemma
    assert summarize(_folder("converted/gemma2"))["resolved"]["model"] == "Gemma2ForCausalLM"
    gemma1 = _with_config(tmp_path, "converted/gemma2", lambda c: c.update(use_post_ffw_norm=False))
    assert summarize(gemma1)["resolved"]["model"] == "GemmaForCausalLM"


def test_a_task_preset_with_its_own_head_gets_no_model_but_its_backbone_does():
    report = summarize(_folder("bert-classifier"))
    assert report["config"] is None and report["analytic"] is None
    assert any("BertBackbone, read as the transformers BertModel alone: with the task's head (BertTextClassifier) no "
               "architecture" in n for n in report["notes"])
    backbone = summarize(os.path.join(_folder("bert-classifier"), "model.weights.json"))
    assert backbone["resolved"]["model"] == "BertModel" and backbone["analytic"] is not None


def test_a_backbone_the_table_lacks_says_so(tmp_path):
    folder = _copy(tmp_path, "gemma-bf16")
    config = json.loads((folder / "config.json").read_text())
    config.update(class_name="PhiBackbone", registered_name="keras_hub>PhiBackbone")
    (folder / "config.json").write_text(json.dumps(config))
    report = summarize(str(folder))
    assert report["config"] is None and report["analytic"] is None
    assert any("PhiBackbone, not a transformers config, and no transformers model type is known" in n
               for n in report["notes"])


@pytest.mark.parametrize("edit, says", [
    (lambda c: c.update(intermediate_dim=63), "intermediate_dim 63"),     # Gemma's is twice transformers' size
    (lambda c: c.update(num_layers="2"), "num_layers '2'"),
    (lambda c: c.update(hidden_dim=[32]), "hidden_dim [32]"),
])
def test_a_config_no_importer_writes_is_not_translated(tmp_path, cli, edit, says):
    folder = _with_config(tmp_path, "gemma-bf16", edit)
    report = summarize(folder)
    assert report["config"] is None and report["parameters"]["unique"] == EXPECTED["gemma-bf16"]["count_params"]
    assert any(says in n and "not what keras_hub's importer makes" in n for n in report["notes"])
    rc, out, err = cli("flops", folder)
    assert rc != 0 and "Traceback" not in err


def test_a_feature_the_backbone_goes_without_is_not_given_by_a_default(tmp_path):
    folder = _with_config(tmp_path, "converted/mistral", lambda c: c.update(sliding_window=None))
    with open_checkpoint(folder) as ck:
        assert ck.config["sliding_window"] is None   # (transformers' MistralConfig would default it)


@pytest.mark.parametrize("command", ["flops", "memory", "summary", "report"])
def test_the_commands_answer_for_a_converted_preset(cli, command, tmp_path):
    args = [command, _folder("converted/qwen3_moe")] + (["-o", str(tmp_path / "r.html")] if command == "report" else [])
    rc, out, err = cli(*args)
    assert rc == 0 and not err.strip(), err


def test_ties_does_not_compare_keras_names_with_the_models(cli):
    rc, out, err = cli("ties", _folder("converted/llama"), "--json")
    report = json.loads(out)
    row = next(r for r in report["counting"]["rows"] if r["convention"].startswith("model.parameters()"))
    assert rc == 0 and row["params"] == EXPECTED["converted/llama"]["transformers"]["num_parameters"]
    assert not row["differences"] and "Keras' HDF5 paths" in report["cross_check"]["reason"]


@pytest.mark.parametrize("tokenizer", sorted(EXPECTED["tokenizer_reads"]))
@pytest.mark.parametrize("name, nested", [("tokenizer.json", False), ("preprocessor.json", True)])
def test_scan_calls_a_tokenizer_that_reads_a_file_unsafe(tmp_path, tokenizer, name, nested):
    rec = EXPECTED["tokenizer_reads"][tokenizer]   # which of them keras_hub reads with safe_mode on: recorded there
    folder = _copy(tmp_path, "gemma-bf16")
    config = json.loads(json.dumps(rec["config"]).replace("SECRET", "/home/user/.ssh/id_rsa"))
    if nested:
        config = {"module": "keras_hub.src.models.gemma.gemma_causal_lm_preprocessor", "class_name":
                  "GemmaCausalLMPreprocessor", "config": {"tokenizer": config}, "registered_name": "x"}
    (folder / name).write_text(json.dumps(config))
    report = scan_path(str(folder))
    judged = [r for r in report["files"] if os.path.basename(r["path"]) == name]
    assert judged and judged[0]["status"] == "unsafe"
    assert f"{tokenizer} {rec['argument']} = '/home/user/.ssh/id_rsa'" in judged[0]["verdict"]
    assert ("even with safe_mode on" in judged[0]["findings"][0]["why"]) == rec["read_in_safe_mode"]


@pytest.mark.parametrize("value", [None, ["a", "b"], "QUJD" * 600])   # assets, a list, an inline SentencePiece proto
def test_a_tokenizer_that_reads_no_file_is_not_listed(tmp_path, value):
    folder = _copy(tmp_path, "gemma-bf16")
    (folder / "tokenizer.json").write_text(json.dumps({
        "module": "keras_hub.src.models.gemma.gemma_tokenizer", "class_name": "GemmaTokenizer",
        "config": {"name": "t", "proto": value, "vocabulary": value if isinstance(value, list) else None},
        "registered_name": "keras_hub>GemmaTokenizer"}))
    assert [os.path.basename(r["path"]) for r in scan_path(str(folder))["files"]] == ["model.weights.h5"]


# --- over https:// and hf:// (h5py reads the remote file object: range requests) ----------------------------------

def _json_of(cli, *args: str) -> tuple[int, dict | None, str]:
    rc, out, err = cli(*args, "--json")
    return rc, (json.loads(out) if rc == 0 else None), err


def _same(report: dict, local: dict, url: str, path: str) -> None:
    for r in (report, local):
        for k in ("path", "files", "seconds", "fetched", "file_size", "checkpoint", "config"):
            r.pop(k, None)
    assert json.loads(json.dumps(report).replace(url.rstrip("/"), "X")) == \
        json.loads(json.dumps(local).replace(path, "X"))


@pytest.mark.parametrize("case", ["converted/llama", "gemma-sharded", "bert-classifier", "keras-sharded"])
def test_a_preset_over_https_and_hf_reads_as_the_local_one(cli, monkeypatch, case):
    from remote_server import Server

    folder = _folder(case)
    local = {cmd: _json_of(cli, cmd, folder)[1] for cmd in ("summary", "stats")}
    with Server(fixture(), hub={"org/keras": folder}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        for url in (f"{s.url}/{EXPECTED[case]['path']}/", "hf://org/keras"):
            for cmd in ("summary", "stats"):
                rc, report, err = _json_of(cli, cmd, url)
                assert rc == 0, err
                _same(report, local[cmd], url, folder)


@pytest.mark.parametrize("behaviour", [{"claim": 64}, {"overlong": 7}, {"ranges": False}, {"drop": True},
                                       {"failures": {"/keras-hub/gemma-sharded/model_00001.weights.h5": [503] * 3}}])
def test_a_server_that_lies_or_fails_gives_the_local_figures_or_one_line(cli, behaviour):
    """Values are never invented from what a server claims: the report equals the local one, or one line says why."""
    from remote_server import Server

    folder = _folder("gemma-sharded")
    _, local, _ = _json_of(cli, "stats", folder)
    with Server(fixture(), **behaviour) as s:
        url = f"{s.url}/keras-hub/gemma-sharded/"
        rc, report, err = _json_of(cli, "stats", url)
    if rc == 0:
        _same(report, local, url, folder)
    else:
        assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("case", CONVERTED)
def test_each_block_holds_what_the_transformers_layer_holds(case):
    """Keras names the first block of a kind bare and the next ones `_1`, `_2`... (naming/ `first`): layer 0, 1..."""
    report = summarize(_folder(case))
    layers = [r["params"] for r in sorted(report["layers"], key=lambda r: r["layer"]) if r["bucket"] == "encoder"]
    assert layers == EXPECTED[case]["transformers"]["layer_params"]


@pytest.mark.parametrize("name, placed", [
    ("layers/gemma3_decoder_block/attention/query_dense/vars/0", ("encoder", 0)),
    ("layers/gemma3_decoder_block_11/attention/query_dense/vars/0", ("encoder", 11)),
    ("layers/transformer_encoder_2/_self_attention_layer/key_dense/vars/1", ("encoder", 2)),
    ("layers/token_and_position_embedding/token_embedding/vars/0", ("embedding", None)),
    ("task/layers/dense/vars/0", ("cls", None)),
    ("model.layers.3.self_attn.q_proj.weight", ("encoder", 3)),   # (transformers' names as before)
    ("decoder.layers.self_attention.linear_qkv.weight", ("decoder", None)),
])
def test_keras_layer_names_are_placed(name, placed):
    from ckptstat.naming import bucket_of, classify

    assert bucket_of(name) == placed and (classify(name).bucket, classify(name).layer) == placed


# --- a KerasHub model saved by model.save (a .keras archive) -------------------------------------------------------

@pytest.mark.parametrize("case", ARCHIVES)
def test_a_keras_archive_of_a_causal_lm_answers_as_its_transformers_model(case):
    from coverage_walk import ours

    rec = EXPECTED[case]
    want = EXPECTED[rec["converted"]]["transformers"]
    path = fixture(rec["path"])
    assert ours("causal", path)[:4] == ("static", want["flops"], want["cache_bytes"], want["num_parameters"])
    report = summarize(path)
    assert report["parameters"]["unique"] == rec["count_params"] == want["num_parameters"]
    assert report["resolved"]["model"] == want["class"]
    assert any(f"Keras config of a {rec['task']} (its " in n for n in report["notes"])


def test_a_keras_archive_of_another_task_gets_no_model(tmp_path):
    import zipfile

    src, dst = fixture(EXPECTED["archive/llama"]["path"]), tmp_path / "classifier.keras"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                config["class_name"] = "Llama3TextClassifier"
                data = json.dumps(config).encode()
            zout.writestr(info, data)
    report = summarize(str(dst))
    assert report["analytic"] is None and report["parameters"]["unique"] == EXPECTED["archive/llama"]["count_params"]
    assert any("KerasHub Llama3TextClassifier: no transformers class is known to hold its task" in n
               for n in report["notes"])


def test_audit_takes_each_preset_folder_as_one_unit(tmp_path, monkeypatch):
    from remote_server import Server

    from ckptstat.analysis.audit import audit_record

    units, _ = discover(fixture("keras-hub"))
    folders = sorted(os.path.relpath(u.path, fixture()) for u in units if os.path.isdir(u.path))
    assert folders == sorted(EXPECTED[c]["path"] for c in CASES if EXPECTED[c]["path"].startswith("keras-hub/"))
    preset = next(u for u in units if u.path == _folder("bert-classifier"))
    assert {os.path.basename(f) for f in preset.files} >= {"task.weights.h5", "model.weights.json", "metadata.json"}
    record = audit_record(preset)
    assert record["parameters"] == EXPECTED["bert-classifier"]["count_params"] and record["error"] is None
    with Server(fixture(), hub={"org/keras": _folder("bert-classifier")}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        remote, _ = discover("hf://org/keras")
        assert len(remote) == 1 and audit_record(remote[0])["parameters"] == record["parameters"]


def test_a_backbone_holding_a_sub_model_the_importer_never_writes_is_not_translated(tmp_path):
    vision = {"module": "keras_hub.src.models.gemma3.gemma3_vision_encoder", "class_name": "Gemma3VisionEncoder",
              "config": {"image_size": 32}, "registered_name": "keras_hub>Gemma3VisionEncoder"}
    folder = _with_config(tmp_path, "converted/gemma3_text", lambda c: c.update(vision_encoder=vision, image_size=32))
    report = summarize(folder)
    assert report["config"] is None and report["analytic"] is None
    assert any("holds a vision_encoder (Gemma3VisionEncoder) that keras_hub's gemma3_text importer never writes" in n
               for n in report["notes"])


def test_a_tied_llama_whose_config_says_nothing_of_it_is_read_tied():
    """KerasHub's Llama3Backbone saves no tie_word_embeddings: keras_hub cannot reload its own tied preset (recorded by
    fixtures/make_keras_hub.py); the weights' one embedding table says tied, as the transformers model was."""
    rec = EXPECTED["converted/llama-tied"]
    assert rec["keras_hub_reloads"] is not True and rec["transformers"]["config"]["tie_word_embeddings"] is True
    with open(os.path.join(_folder("converted/llama-tied"), "config.json")) as f:
        assert "tie_word_embeddings" not in json.load(f)["config"]
    report = summarize(_folder("converted/llama-tied"))
    assert any("says nothing of tie_word_embeddings and the weights hold one embedding table" in n for n in report["notes"])
    assert not any("says nothing of tie_word_embeddings" in n for n in summarize(_folder("converted/llama"))["notes"])


def test_a_tokenizer_json_outside_a_preset_is_not_read_as_a_keras_config(tmp_path):
    """A transformers folder's tokenizer.json (tens of MB) is tokenizers', never rebuilt by Keras: only a preset's
    (metadata.json beside it) is judged."""
    rec = EXPECTED["tokenizer_reads"]["PARSeqTokenizer"]
    folder = _copy(tmp_path, "gemma-bf16")
    (folder / "tokenizer.json").write_text(json.dumps(rec["config"]))
    assert "tokenizer.json" in [os.path.basename(r["path"]) for r in scan_path(str(folder))["files"]]
    os.unlink(folder / "metadata.json")
    assert "tokenizer.json" not in [os.path.basename(r["path"]) for r in scan_path(str(folder))["files"]]
