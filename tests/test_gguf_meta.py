"""The GGUF metadata the human summary and the report show (formats/gguf_meta.py): file type names and keys
are gguf-py's, and every figure shown is what gguf-py's own reader reads back from the file (files written by
GGUFWriter here, and by llama.cpp's converter in fixtures/conversions/)."""
from __future__ import annotations

import glob
import json
import re

import numpy as np
import pytest
from conftest import fixture

from ckptstat.formats import gguf_meta

gguf = pytest.importorskip("gguf")


def test_file_types_are_gguf_pys():
    assert gguf_meta.FILE_TYPES == {t.value: t.name for t in gguf.LlamaFileType}


def test_keys_are_llama_cpps():
    """Every key read is one gguf-py's `Keys` names (a misspelt key would silently show nothing)."""
    known = {v for group in vars(gguf.Keys).values() if isinstance(group, type)
             for k, v in vars(group).items() if not k.startswith("_") and isinstance(v, str)}
    source = open(gguf_meta.__file__).read()
    used = set(re.findall(r'"((?:general|tokenizer|\{arch\})\.[a-z_.{}]+)"', source))
    used |= {f"tokenizer.ggml.{k}_token_id" for k in re.findall(r'for k in \(([^)]*)\)', source)[0]
             .replace('"', "").replace(" ", "").split(",")}
    used = {u for u in used if "{k}" not in u}
    assert used and used <= known, sorted(used - known)


def _write(path: str, name: str = "Tiny Llama") -> dict:
    """A llama GGUF with the metadata users' files carry: a long token list, merges, rope scaling, experts,
    a chat template longer than the reader keeps as text."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_size_label("1.1B")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(2)
    w.add_context_length(4096)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(64)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(1024)
    w.add_expert_count(8)
    w.add_expert_used_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([f"t{i}" for i in range(300)])
    w.add_token_merges([f"t {i}" for i in range(40)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{{ messages }}" * 20_000)
    w.add_tensor("token_embd.weight", np.ones((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {f.name: f.contents() for f in gguf.GGUFReader(path).fields.values() if not f.name.startswith("GGUF.")}


def test_summary_shows_what_gguf_py_reads(cli, tmp_path):
    path = str(tmp_path / "m.gguf")
    truth = _write(path)
    rc, out, err = cli("summary", path, "--json")
    facts = json.loads(out)["gguf"]
    assert rc == 0 and not err
    assert f"file type {gguf.LlamaFileType(truth['general.file_type']).name}" in facts["gguf"]
    assert f"quantization version {truth['general.quantization_version']}" in facts["gguf"]
    assert facts["model"] == f"name {truth['general.name']}, size {truth['general.size_label']}"
    assert facts["context"] == f"trained on {truth['llama.context_length']} tokens"
    assert f"scaling {truth['llama.rope.scaling.type']}" in facts["rope"]
    assert f"original context {truth['llama.rope.scaling.original_context_length']}" in facts["rope"]
    assert f"dims {truth['llama.rope.dimension_count']}" in facts["rope"]
    assert float(re.search(r"freq_base (\S+),", facts["rope"]).group(1)) == truth["llama.rope.freq_base"]
    assert facts["experts"] == f"{truth['llama.expert_count']} routed, {truth['llama.expert_used_count']} used per token"
    tok = facts["tokenizer"]
    assert f"{len(truth['tokenizer.ggml.tokens'])} tokens" in tok and f"{len(truth['tokenizer.ggml.merges'])} merges" in tok
    assert f"bos {truth['tokenizer.ggml.bos_token_id']}" in tok and tok.startswith(truth["tokenizer.ggml.model"])
    assert f"chat template {len(truth['tokenizer.chat_template'].encode()):,} bytes" in tok
    rc, human, _ = cli("summary", path)
    assert rc == 0 and all(re.search(rf"^{label} +{re.escape(line[:30])}", human, re.M) for label, line in facts.items())
    rc, md, _ = cli("report", path, "--no-stats", "--output", str(tmp_path / "r.md"))
    report = (tmp_path / "r.md").read_text()
    assert rc == 0 and f"trained on {truth['llama.context_length']} tokens" in report


def test_a_hostile_name_is_inert(cli, tmp_path):
    path = str(tmp_path / "m.gguf")
    _write(path, name="evil\u202e\u2028\x1b[31mname")
    rc, out, _ = cli("summary", path)
    line = next(line for line in out.splitlines() if line.startswith("model"))
    assert rc == 0 and not any(c in line for c in "\u202e\u2028\x1b")


@pytest.mark.parametrize("path", sorted(glob.glob(fixture("conversions", "**", "*.gguf"), recursive=True)))
def test_llama_cpp_conversions(cli, path):
    """The converter's files: the file type llama.cpp wrote, by its own name."""
    fields = gguf.GGUFReader(path).fields
    rc, out, _ = cli("summary", path, "--json")
    facts = json.loads(out)["gguf"]
    assert rc == 0 and facts["gguf"].startswith(
        f"file type {gguf.LlamaFileType(fields['general.file_type'].contents()).name} ")
    arch = fields["general.architecture"].contents()
    window = fields.get(f"{arch}.attention.sliding_window")
    assert facts["context"] == f"trained on {fields[f'{arch}.context_length'].contents()} tokens" + (
        f", sliding window {window.contents()}" if window else "")


def test_not_a_gguf_has_no_gguf_facts(cli):
    rc, out, _ = cli("summary", fixture("gpt2-tiny"), "--json")
    assert rc == 0 and json.loads(out)["gguf"] is None
