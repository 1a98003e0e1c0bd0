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

import json
import os
from typing import IO, Any

from ...core.urls import basename, is_url
from ...errors import CorruptCheckpointError
from ...formats.gguf import MAGIC, chat_templates
from .jinja import SHOWN, judge
from .torch_load import plain_report

TEMPLATE_BYTES = 1 << 20   # a template longer than this is not read (real ones: a few KiB to ~100 KiB)
CONFIG_BYTES = 64 << 20    # a tokenizer_config.json with a large added-token table: tens of MiB
CONFIGS = frozenset({"tokenizer_config.json", "chat_template.json", "processor_config.json"})
GGUF_RENDERERS = ("llama-cpp-python renders it (before 0.2.72 without jinja2's sandbox: CVE-2024-34359); llama.cpp's "
                  "own engine reaches no Python")
HF_RENDERERS = ("transformers' apply_chat_template renders it in jinja2's sandbox (before jinja2 3.1.6 escaped "
                "through str.format); other frontends may render it without one")


def _name(path: str) -> str:
    return basename(path) if is_url(path) else os.path.basename(path)


def is_template_file(path: str) -> bool:
    """A file whose name says it holds chat templates (its whole text, or a JSON config's `chat_template`)."""
    name = _name(path)
    return name.endswith(".jinja") or name in CONFIGS


def judge_templates(path: str, f: IO[bytes], size: int, head: bytes) -> dict[str, Any] | None:
    """The scan report of a GGUF's or a Hugging Face file's chat templates; None for a JSON config without one, or
    not JSON (not a file scan looks at)."""
    if head[:4] == MAGIC:
        return _report(path, "GGUF", chat_templates(path, f, size, TEMPLATE_BYTES), GGUF_RENDERERS,
                       "no chat template in its metadata")
    name = _name(path)
    if name.endswith(".jinja"):
        if size > TEMPLATE_BYTES:
            return _report(path, "Jinja chat template", {name: size}, HF_RENDERERS, "")
        f.seek(0)
        return _report(path, "Jinja chat template", {name: f.read(size).decode("utf-8", "replace")}, HF_RENDERERS, "")
    if size > CONFIG_BYTES:
        raise CorruptCheckpointError(path, f"{name} is {size:,} bytes, more than the {CONFIG_BYTES:,} scan reads")
    f.seek(0)
    try:
        config = json.loads(f.read(size))
    except (ValueError, RecursionError):   # not a config (torch.load's verdict stands, or it is no scan subject)
        return None
    value = config.get("chat_template") if isinstance(config, dict) else None
    if value is None:
        return None
    entries = value if isinstance(value, list) else [{"name": "default", "template": value}]
    found: dict[str, str | int] = {}
    for i, entry in enumerate(entries):
        text = entry.get("template") if isinstance(entry, dict) else None
        if not isinstance(text, str):
            raise CorruptCheckpointError(path, f"chat_template entry {i} is not a template string")
        key = f"chat_template[{entry.get('name', i)!r}]" if isinstance(value, list) else "chat_template"
        found[key] = text if len(text) <= TEMPLATE_BYTES else len(text)
    return _report(path, f"Hugging Face {name}", found, HF_RENDERERS, "")


def _report(path: str, fmt: str, found: dict[str, str | int], renderers: str, none: str) -> dict[str, Any]:
    findings: list[dict[str, Any]] = []
    unknown: list[str] = []
    for key, text in found.items():
        if isinstance(text, int):
            unknown.append(f"{key}: a template of {text:,} bytes; scan reads at most {TEMPLATE_BYTES:,}")
            continue
        v = judge(text, key)
        findings += [{"record": key, "offset": 0, "file_offset": None, "opcode": "jinja",
                      "global": f"{key} line {x.line}: {x.what}", "why": x.why} for x in v.findings[:SHOWN]]
        if len(v.findings) > SHOWN:
            findings.append({"record": key, "offset": 0, "file_offset": None, "opcode": "jinja",
                             "global": f"{key}: {len(v.findings) - SHOWN:,} more", "why": "as above"})
        unknown += v.unknown[:SHOWN] + ([f"{key}: {len(v.unknown) - SHOWN:,} more"] if len(v.unknown) > SHOWN else [])
    unsafe = [fd["global"] for fd in findings]
    shown = "; ".join(unsafe[:3]) + (f" ... ({len(unsafe)} in all)" if len(unsafe) > 3 else "")
    verdict = (f"UNSAFE: a chat template reaches Python's internals ({shown}): a renderer without jinja2's sandbox runs "
               "what it reaches; no real chat template needs it" if unsafe else
               f"SUSPICIOUS: {unknown[0]}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
               if unknown else f"safe: {none}" if not found else
               f"safe: {len(found)} chat template(s) look up only literal names, numbers and the renderer's data; "
               "none reaches Python's internals")
    notes = [f"{len(found)} chat template(s): {', '.join(found)}"] if found else []
    return plain_report(path, fmt, f"not torch.load's: a chat frontend renders its templates as Jinja; {renderers}",
                        findings, unsafe, unknown, notes, verdict)
