"""`ckptstat scan` of the chat templates a model carries (docs/security.md, "Chat templates"): a GGUF's
`tokenizer.chat_template` (and its named `tokenizer.chat_template.<name>` ones), and in a Hugging Face folder
`chat_template.jinja`, `additional_chat_templates/*.jinja` and the `chat_template` of tokenizer_config.json,
chat_template.json and processor_config.json (a string, or a list of {name, template}).

Each is judged without rendering it (analysis/scan/jinja.py). Who renders them: llama-cpp-python's chat formatter
(a GGUF's template; before 0.2.72 in a plain jinja2 Environment, CVE-2024-34359: whatever the template reaches runs),
transformers' apply_chat_template (jinja2's ImmutableSandboxedEnvironment; jinja2 before 3.1.6 could be escaped
through str.format), and other frontends, sandboxed or not.
"""
from __future__ import annotations

from typing import IO, Any

from ...core.urls import file_name
from ...formats.gguf import MAGIC, chat_templates
from .jinja import SHOWN, judge
from .torch_load import plain_report

TEMPLATE_BYTES = 1 << 20   # a template longer than this is not read (real ones: a few KiB to ~100 KiB)
GGUF_RENDERERS = ("a chat frontend renders its templates as Jinja: llama-cpp-python (before 0.2.72 without jinja2's "
                  "sandbox: CVE-2024-34359); llama.cpp's own engine reaches no Python")
HF_RENDERERS = ("a chat frontend renders its templates as Jinja: transformers' apply_chat_template in jinja2's sandbox "
                "(escaped through str.format before jinja2 3.1.6); other frontends may render them without one")


def is_template_file(path: str) -> bool:
    """A file whose whole text is a chat template (`chat_template.jinja`, `additional_chat_templates/*.jinja`)."""
    return file_name(path).endswith(".jinja")


def judge_templates(path: str, f: IO[bytes], size: int, head: bytes) -> dict[str, Any]:
    """The scan report of a GGUF's chat templates, or of a `.jinja` file's."""
    if head[:4] == MAGIC:
        return template_report(path, "GGUF", chat_templates(path, f, size, TEMPLATE_BYTES), GGUF_RENDERERS,
                               "no chat template in its metadata")
    name = file_name(path)
    if size > TEMPLATE_BYTES:
        return template_report(path, "Jinja chat template", {name: size}, HF_RENDERERS, "")
    f.seek(0)
    return template_report(path, "Jinja chat template", {name: f.read(size).decode("utf-8", "replace")}, HF_RENDERERS,
                           "")


def config_templates(path: str, config: dict[str, Any]) -> dict[str, str | int]:
    """A Hugging Face JSON config's `chat_template`: a string, a list of {name, template} (what save_pretrained
    writes), or a dict of name -> template, which the tokenizer keeps as it stands (transformers'
    tokenization_utils_base `get_chat_template` renders its "default"). An entry that is no string is no template
    (a None beside the one rendered loads, and is never compiled): passed over, never the end of the file's scan."""
    value = config.get("chat_template")
    if value is None:
        return {}
    entries = ([{"name": k, "template": v} for k, v in value.items()] if isinstance(value, dict) else
               value if isinstance(value, list) else [{"name": "default", "template": value}])
    found: dict[str, str | int] = {}
    for i, entry in enumerate(entries):
        text = entry.get("template") if isinstance(entry, dict) else None
        if not isinstance(text, str):
            continue
        key = "chat_template" if isinstance(value, str) else f"chat_template[{entry.get('name', i)!r}]"
        found[key] = text if len(text) <= TEMPLATE_BYTES else len(text)
    return found


def template_report(path: str, fmt: str, found: dict[str, str | int], renderers: str, none: str,
                    more_unknown: list[str] | None = None, more_notes: list[str] | None = None) -> dict[str, Any]:
    """The report of the chat templates `found` (key -> text, or its length when not read), with what else the file
    leaves unknown (`more_unknown`: a config's remote code, analysis/scan/hf_config.py)."""
    findings: list[dict[str, Any]] = []
    unknown: list[str] = []
    for key, text in found.items():
        if isinstance(text, int):
            unknown.append(f"{key}: a template of {text:,} bytes; scan reads at most {TEMPLATE_BYTES:,}")
            continue
        v = judge(text, key)
        findings += [{"record": key, "offset": None, "file_offset": None, "opcode": "jinja",
                      "global": f"line {x.line}: {x.what}", "why": x.why} for x in v.findings[:SHOWN]]
        if len(v.findings) > SHOWN:
            findings.append({"record": key, "offset": None, "file_offset": None, "opcode": "jinja",
                             "global": f"{len(v.findings) - SHOWN:,} more", "why": "as above"})
        unknown += v.unknown[:SHOWN] + ([f"{key}: {len(v.unknown) - SHOWN:,} more"] if len(v.unknown) > SHOWN else [])
    unknown += more_unknown or []
    unsafe = [f"{fd['record']} {fd['global']}" for fd in findings]
    shown = "; ".join(unsafe[:3]) + (f" ... ({len(unsafe)} in all)" if len(unsafe) > 3 else "")
    verdict = (f"UNSAFE: a chat template reaches Python's internals ({shown}): a renderer without jinja2's sandbox runs "
               "what it reaches; no real chat template needs it" if unsafe else
               f"SUSPICIOUS: {unknown[0]}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
               if unknown else f"safe: {none}" if not found else
               f"safe: {len(found)} chat template(s) look up only literal names, numbers and the renderer's data; "
               "none reaches Python's internals")
    notes = ([f"{len(found)} chat template(s): {', '.join(found)}"] if found else []) + (more_notes or [])
    return plain_report(path, fmt, f"not torch.load's: {renderers}", findings, unsafe, unknown, notes, verdict)
