"""`ckptstat scan` of chat templates (analysis/scan/jinja.py, analysis/scan/chat_templates.py) against jinja2 itself.

The oracle: jinja2 renders every hostile template of tests/chat_template_corpus.py in a plain Environment (as
llama-cpp-python before 0.2.72 rendered a GGUF's) and reaches a Python object its sandbox refuses; scan must call
each `unsafe` (named literally) or `unknown` (computed), never `safe`, in the files users have: a GGUF written by
gguf-py, a Hugging Face folder written by transformers' save_pretrained, a Hugging Face cache with symlinked blobs,
and over http. Benign templates render in jinja2's sandbox and scan safe. The lexer's tokens are jinja2's lexer's.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

jinja2 = pytest.importorskip("jinja2")
sandbox = pytest.importorskip("jinja2.sandbox")
gguf = pytest.importorskip("gguf")

from chat_template_corpus import BENIGN, HOSTILE, HOSTILE_CONTEXT, context  # noqa: E402
from hf_cache import hf_repo  # noqa: E402
from jinja2.lexer import reverse_operators  # noqa: E402
from remote_server import Server  # noqa: E402

from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.chat_templates import TEMPLATE_BYTES  # noqa: E402
from ckptstat.analysis.scan.jinja import SHOWN, judge, lex  # noqa: E402

EXTENSIONS = ["jinja2.ext.loopcontrols"]   # what transformers enables
# The mistral template raises (as it should) on a conversation whose roles do not alternate.
BENIGN_CONTEXT = {"mistral_alternation": {"messages": [
    {"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"}, {"role": "user", "content": "Thanks"}]}}
LEXER_CASES = [
    "{{ 1.5e3 + 0x1F + 0b101 + 0o17 + 1_000 + 2.5 }}{{ x.0 }}{{ a//b ** c }}",
    "{%- if a -%}\n{%+ if b +%}{{- c -}}{% endif %}{% endif %}{#- c -#}",
    "{{ 'a\\'b' ~ \"c\\\"d\" ~ '\\n\\t\\\\' ~ '\\u00e9\\x41' }}",
    "text {% raw -%} {{ not_code }} {%- endraw %} {{ code }}",
    "{{ {'a': [1, (2, 3)], 'b': {'c': 4}} }}",
    "{{ 'é' ~ ünïcödé_name }}",
]


def _tokens_jinja2(src):
    env = jinja2.Environment(extensions=EXTENSIONS)
    out = []
    for tok in env.lexer.tokenize(src):
        if tok.type in ("name", "string"):
            out.append((tok.type, tok.value))
        elif tok.type in ("integer", "float"):
            out.append((tok.type, None))
        elif tok.type in reverse_operators:
            out.append(("operator", reverse_operators[tok.type]))
    return out


def _tokens_ours(src):
    return [(t.kind, None if t.kind in ("integer", "float") else t.value) for tag in lex(src) for t in tag.tokens]


def reaches(src, ctx):
    """jinja2's verdict: a plain Environment renders the template, and its sandbox refuses it (SecurityError) or
    renders something else (the unsafe look-up made undefined)."""
    plain = jinja2.Environment(extensions=EXTENSIONS).from_string(src).render(**ctx)
    try:
        sandboxed = sandbox.ImmutableSandboxedEnvironment(extensions=EXTENSIONS).from_string(src).render(**ctx)
    except jinja2.exceptions.SecurityError:
        return True
    return sandboxed != plain


def status(src):
    v = judge(src)
    return "unsafe" if v.findings else "unknown" if v.unknown else "safe"


def test_lexer_reads_the_tokens_jinja2_reads():
    for src in [*LEXER_CASES, *BENIGN.values(), *(s for s, _ in HOSTILE.values())]:
        assert _tokens_ours(src) == _tokens_jinja2(src), src


def test_every_hostile_template_reaches_python_under_a_plain_renderer():
    for name, (src, _) in HOSTILE.items():
        assert reaches(src, context(**HOSTILE_CONTEXT.get(name, {}))), name


def test_scan_calls_each_hostile_template_what_it_is():
    for name, (src, want) in HOSTILE.items():
        assert status(src) == want, (name, judge(src))


def test_an_accessor_filters_attribute_argument_by_its_position():
    """jinja2/filters.py's signatures: the attribute is sort's third positional argument, unique's and max's second,
    sum's and groupby's first; other positions are flags (`sort(false, false, ...)`)."""
    for src in ("{{ x|sort(false, false, '_p') }}", "{{ x|unique(false, '_p') }}", "{{ x|max(false, '_p') }}",
                "{{ x|sum('_p') }}", "{{ x|groupby('_p') }}", "{{ x|selectattr('_p') }}", "{{ x|map('attr', '_p') }}"):
        assert status(src) == "unsafe", src
    for src in ("{{ x|sort(false, false, 'name') }}", "{{ x|map('format', 1) }}", "{{ x|selectattr('role', 'in', "
                "['format']) }}"):
        assert status(src) == "safe", src


def test_benign_templates_render_in_the_sandbox_and_scan_safe():
    for name, src in BENIGN.items():
        ctx = context(**BENIGN_CONTEXT.get(name, {}))
        sandboxed = sandbox.ImmutableSandboxedEnvironment(extensions=EXTENSIONS).from_string(src).render(**ctx)
        assert sandboxed == jinja2.Environment(extensions=EXTENSIONS).from_string(src).render(**ctx), name
        assert status(src) == "safe", (name, judge(src))


def _gguf(path, template=None):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    if template is not None:
        w.add_chat_template(template)
    w.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 8), dtype="float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_files_by_the_cli(tmp_path, cli):
    """Every hostile template in a GGUF written by gguf-py: `ckptstat scan FILE` exits 1 with the template's status;
    a benign one and none at all exit 0; one of each through a subprocess, as users run it."""
    for name, (src, want) in HOSTILE.items():
        rc, out, _ = cli("scan", str(_gguf(tmp_path / f"{name}.gguf", src)), "--json")
        r = json.loads(out)
        assert (rc, r["status"], r["format"]) == (1, want, "GGUF"), name
        assert r["verdict"].startswith("UNSAFE" if want == "unsafe" else "SUSPICIOUS"), name
    for name, src in [*BENIGN.items(), ("none", None)]:
        rc, out, _ = cli("scan", str(_gguf(tmp_path / f"{name}.gguf", src)), "--json")
        assert (rc, json.loads(out)["status"]) == (0, "safe"), name
    for name, rc in (("cycler_globals", 1), ("chatml", 0)):
        p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(tmp_path / f"{name}.gguf")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == rc and "Traceback" not in p.stderr, p.stderr
    assert "UNSAFE" in subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(tmp_path / "cycler_globals.gguf")],
                                      capture_output=True, text=True, timeout=120).stdout


def test_named_templates_in_a_gguf(tmp_path):
    """gguf-py writes named templates as tokenizer.chat_template.<name>: each is judged, and named."""
    path = _gguf(tmp_path / "named.gguf", [{"name": "default", "template": BENIGN["chatml"]},
                                           {"name": "tool_use", "template": HOSTILE["lipsum_globals"][0]}])
    r = scan_path(str(path))
    assert r["status"] == "unsafe"
    assert {f["record"] for f in r["findings"]} == {"tokenizer.chat_template.tool_use"}
    assert set(r["notes"][0].split(": ", 1)[1].split(", ")) == {"tokenizer.chat_template",
                                                                "tokenizer.chat_template.tool_use"}


def test_a_hugging_face_cache_folder(tmp_path):
    """A GGUF downloaded into a Hugging Face cache (symlinked blobs) beside a safetensors file: the folder scan lists
    the GGUF, unsafe, under its snapshot name; the CLI exits 1."""
    hf_repo(tmp_path / "hub", {"model-Q4.gguf": _gguf(tmp_path / "x.gguf", HOSTILE["item_literal"][0]).read_bytes(),
                               "clean.gguf": _gguf(tmp_path / "y.gguf", BENIGN["llama3_tools"]).read_bytes()})
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(tmp_path / "hub"), "--json"],
                       capture_output=True, text=True, timeout=120)
    files = {f["path"].rsplit("/", 1)[-1]: f["status"] for f in json.loads(p.stdout)["files"]}
    assert p.returncode == 1 and files == {"model-Q4.gguf": "unsafe", "clean.gguf": "safe"}, p.stdout


def _tokenizer():
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")), bos_token="<s>",
        eos_token="</s>")
    tok.chat_template = {"default": BENIGN["qwen_last_query"], "tool_use": HOSTILE["format_field"][0],
                         "rag": HOSTILE["set_then_item"][0]}
    return tok


def test_a_folder_transformers_saved(tmp_path, cli):
    """transformers 5's save_pretrained: chat_template.jinja and additional_chat_templates/<name>.jinja, each judged;
    with save_jinja_files=False (the older layout) the templates inside tokenizer_config.json."""
    tok = _tokenizer()
    tok.save_pretrained(tmp_path / "jinja")
    rc, out, _ = cli("scan", str(tmp_path / "jinja"), "--json")
    files = {f["path"]: f["status"] for f in json.loads(out)["files"]}
    assert rc == 1 and files == {"chat_template.jinja": "safe", "additional_chat_templates/tool_use.jinja": "unsafe",
                                 "additional_chat_templates/rag.jinja": "unknown"}, files
    tok.save_pretrained(tmp_path / "json", save_jinja_files=False)
    config = json.loads((tmp_path / "json" / "tokenizer_config.json").read_text())
    assert isinstance(config["chat_template"], list)   # what transformers wrote: [{name, template}, ...]
    r = scan_path(str(tmp_path / "json" / "tokenizer_config.json"))
    assert r["status"] == "unsafe" and {f["record"] for f in r["findings"]} == {"chat_template['tool_use']"}
    assert any("chat_template['rag']" in u for u in r["unknown"])
    rc, out, _ = cli("scan", str(tmp_path / "json"), "--json")
    assert rc == 1 and {f["path"] for f in json.loads(out)["files"]} == {"tokenizer_config.json"}


def test_a_config_without_a_template_is_not_listed(tmp_path, cli):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8}))
    (tmp_path / "processor_config.json").write_text("not json")
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 0 and json.loads(out)["files"] == []


def test_over_http_the_same(tmp_path):
    """`ckptstat scan URL` of a GGUF and of a .jinja (a subprocess, a loopback server) says what the local scan says."""
    _gguf(tmp_path / "m.gguf", HOSTILE["namespace_globals"][0])
    (tmp_path / "chat_template.jinja").write_text(HOSTILE["join_then_attr"][0])
    with Server(str(tmp_path)) as s:
        for name in ("m.gguf", "chat_template.jinja"):
            p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/{name}", "--json"],
                               capture_output=True, text=True, timeout=120)
            remote, local = json.loads(p.stdout), scan_path(str(tmp_path / name))
            assert p.returncode == 1 and remote["status"] == local["status"] != "safe", (name, p.stderr)
            assert remote["findings"] == local["findings"] and remote["unknown"] == local["unknown"]


def test_bounds(tmp_path):
    """What a hostile file claims is bounded: a template past TEMPLATE_BYTES is not read (unknown); brackets nested
    200,000 deep, 100,000 findings (20 listed) and a tag never closed cost one pass each; a GGUF whose template's length runs
    past the file is one line naming it."""
    r = scan_path(str(_gguf(tmp_path / "big.gguf", "{{ x }}" + " " * TEMPLATE_BYTES)))
    assert r["status"] == "unknown" and "scan reads at most" in r["unknown"][0]
    deep = "{{ x" + "[" * 200_000 + "0" + "]" * 200_000 + " }}"
    assert status(deep) == "safe"
    many = judge("{{ x.__class__ }}" * 100_000)
    assert len(many.findings) == 100_000
    (tmp_path / "chat_template.jinja").write_text("{{ x.__class__ }}" * 50_000)
    r = scan_path(str(tmp_path / "chat_template.jinja"))
    assert len(r["findings"]) == SHOWN + 1 and r["findings"][-1]["global"].endswith(f"{50_000 - SHOWN:,} more")
    assert status("{{ x.y ") == "unknown" and status("{{ x[1 }}") == "unknown"
    raw = bytearray(_gguf(tmp_path / "t.gguf", "{{ 1 }}").read_bytes())
    at = raw.index(b"tokenizer.chat_template") + len(b"tokenizer.chat_template") + 4
    raw[at:at + 8] = (10**12).to_bytes(8, "little")
    (tmp_path / "t.gguf").write_bytes(raw)
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(tmp_path / "t.gguf")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "t.gguf" in p.stderr, p.stderr
