"""Chat templates for tests/test_scan_chat_templates.py (not collected: no test_ prefix).

HOSTILE: templates that reach Python's internals when a renderer without jinja2's sandbox renders them (the payload
classes of server-side template injection, written for this corpus), each with the status scan must give: "unsafe"
where the template names the internal literally, "unknown" where it computes the name at render time. The tests
measure each with jinja2 itself (`reaches`): a plain Environment renders it, the sandbox refuses it.

BENIGN: templates written in the manner of the models' own (ChatML, Llama 3 with tools and a date, Mistral's
alternation check, Qwen's reverse scan for the last query, DeepSeek's reasoning split, a Hermes-style JSON-schema
macro, Gemma's system folding), each rendered in jinja2's sandbox by the tests (no SecurityError) and scanned safe.
"""
from __future__ import annotations

from typing import Any

CONTEXT: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>add</think>4",
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4"},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number", "description": "b"}},
        "required": ["a"]}}}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True,
}


def _raise(message: str) -> None:
    raise ValueError(message)


def context(**extra: Any) -> dict[str, Any]:
    """What a renderer passes (transformers: messages, tools, the special tokens, raise_exception, strftime_now)."""
    return {**CONTEXT, "raise_exception": _raise, "strftime_now": lambda fmt: "04 Dec 2026", **extra}


HOSTILE: dict[str, tuple[str, str]] = {
    "mro_subclasses": ("{{ ''.__class__.__mro__[1].__subclasses__()|length }}", "unsafe"),
    "cycler_globals": ("{{ cycler.__init__.__globals__.os.name }}", "unsafe"),
    "lipsum_globals": ("{{ lipsum.__globals__['os'].name }}", "unsafe"),
    "joiner_globals": ("{{ joiner.__init__.__globals__.os.name }}", "unsafe"),
    "namespace_globals": ("{{ namespace.__init__.__globals__.os.name }}", "unsafe"),
    "self_context": ("{{ self._TemplateReference__context.cycler.__init__.__globals__.os.name }}", "unsafe"),
    "attr_hex_escapes": ("{{ ''|attr('\\x5f\\x5fclass\\x5f\\x5f') }}", "unsafe"),
    "attr_unicode_escapes": ("{{ ''|attr('\\u005f\\u005fclass\\u005f\\u005f') }}", "unsafe"),
    "item_literal": ("{{ ''['__class__'] }}", "unsafe"),
    "item_private": ("{{ self['_TemplateReference__context'] }}", "unsafe"),
    "dict_keyword_name": ("{{ ''|attr(dict(__class__=1)|first) }}", "unsafe"),
    "map_attribute": ("{{ (messages|map(attribute='__class__')|list)[0] }}", "unsafe"),
    "map_attr_filter": ("{{ (messages|map('attr', '__class__')|list)[0] }}", "unsafe"),
    "format_field": ("{{ '{0.__class__}'.format(messages) }}", "unsafe"),
    "reversed_literal": ("{{ ''|attr('__ssalc__'|reverse) }}", "unsafe"),
    "catch_warnings_loop": ("{% for c in ''.__class__.__mro__[1].__subclasses__() %}"
                            "{% if c.__name__ == 'catch_warnings' %}{{ c()._module.__builtins__['len']([1]) }}"
                            "{% endif %}{% endfor %}", "unsafe"),
    "hidden_by_trim_marks": ("{#- a comment -#}{{- ''.__class__ -}}", "unsafe"),
    "after_raw_block": ("{% raw %}{{ plain }}{% endraw %}{{ ''.__class__ }}", "unsafe"),
    "end_marker_in_string": ("{{ '}}' ~ ''.__class__|string }}", "unsafe"),
    "inside_dict_literal": ("{{ {'a': {'b': ''.__class__}} }}", "unsafe"),
    "format_private_field": ("{{ '{0._TemplateReference__context}'.format(self) }}", "unsafe"),
    "groupby_private_name": ("{{ ([self]|groupby('_TemplateReference__context')|first).grouper }}", "unsafe"),
    "item_concatenated": ("{{ ''['_'*2 ~ 'class' ~ '_'*2] }}", "unknown"),
    "set_then_item": ("{% set k = '_'*2 ~ 'class' ~ '_'*2 %}{{ ''[k] }}", "unknown"),
    "join_then_attr": ("{% set k = ['_', '_', 'class', '_', '_']|join %}{{ ''|attr(k) }}", "unknown"),
    "format_char_95": ("{% set u = '%c'|format(95) %}{{ ''|attr(u*2 ~ 'class' ~ u*2) }}", "unknown"),
    "lipsum_text_slice": ("{% set u = (lipsum|string)[18] %}{{ ''[u*2 ~ 'class' ~ u*2] }}", "unknown"),
    "list_pieces_added": ("{{ ''[(['__cl']|first) + (['ass__']|first)] }}", "unknown"),
    "macro_output_key": ("{% macro k() %}__class__{% endmacro %}{{ ''[k()] }}", "unknown"),
    "block_set_key": ("{% set k %}__class__{% endset %}{{ ''[k] }}", "unknown"),
    "macro_argument_key": ("{% macro g(x, k) %}{{ x[k] }}{% endmacro %}{{ g('', '_'*2 ~ 'class' ~ '_'*2) }}",
                           "unknown"),
    "namespace_field_key": ("{% set ns = namespace(k='') %}{% set ns.k = '_'*2 ~ 'class' ~ '_'*2 %}{{ ''[ns.k] }}",
                            "unknown"),
    "special_token_key": ("{{ ''[bos_token] }}", "unknown"),   # a GGUF's bos token text is the file author's
    "bound_literal_pieces": ("{% set k = 'a_' %}{{ ''[(k|last) ~ (k|last) ~ 'class' ~ (k|last) ~ (k|last)] }}",
                             "unknown"),
    "bound_private_literal": ("{% set k = '_TemplateReference__context' %}{{ self[k] }}", "unknown"),
    "format_string_built": ("{% set u = (()|select|string)[24] %}{% set f = '{0.' ~ u ~ u ~ 'class' ~ u ~ u ~ '}' %}"
                            "{{ f.format('') }}", "unknown"),
    "filter_block_attr": ("{% set k = (()|select|string)[24] %}{% filter attr(k ~ k ~ 'class' ~ k ~ k)|string %}x"
                          "{% endfilter %}", "unknown"),
    "generator_text": ("{% set u = (()|select|string)[24] %}{{ lipsum|attr(u ~ u ~ 'globals' ~ u ~ u) }}", "unknown"),
    "view_text": ("{% set u = ({}.items() ~ '')[4] %}{{ ''[u ~ u ~ 'class' ~ u ~ u] }}", "unknown"),
    "iterator_text": ("{% set u = (messages|reverse|string)[5] %}{{ ''[u ~ u ~ 'class' ~ u ~ u] }}", "unknown"),
}
# The context a hostile template needs to reach what it reaches (the file author's bos token).
HOSTILE_CONTEXT = {"special_token_key": {"bos_token": "__class__"}}

BENIGN: dict[str, str] = {
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
        "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "llama3_tools": (
        "{{- bos_token }}\n{%- if not date_string is defined %}{%- if strftime_now is defined %}"
        "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}{%- set date_string = '26 Jul 2024' %}"
        "{%- endif %}{%- endif %}\n"
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
        "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}\n"
        "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Today Date: ' + date_string + '\\n\\n' }}\n"
        "{%- if tools is not none %}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}"
        "{%- endif %}{{- system_message }}{{- '<|eot_id|>' }}\n"
        "{%- for message in messages %}{%- if 'tool_calls' in message %}"
        "{%- set tool_call = message.tool_calls[0].function %}"
        "{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' }}{{- tool_call.arguments | tojson }}{{- '}' }}"
        "{%- elif message.role == 'tool' %}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}"
        "{%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}"
        "{%- else %}{{- message.content }}{%- endif %}{{- '<|eot_id|>' }}"
        "{%- else %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
        "message['content'] | trim + '<|eot_id|>' }}{%- endif %}{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "mistral_alternation": (
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
        "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
        "{{- bos_token }}{%- for message in loop_messages %}"
        "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) and message['role'] != 'tool' %}"
        "{%- if message['role'] != 'assistant' %}{{- raise_exception('roles must alternate user/assistant/...') }}"
        "{%- endif %}{%- endif %}"
        "{%- if message['role'] == 'user' %}{%- if loop.last and system_message is defined %}"
        "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
        "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
        "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token }}{%- endif %}"
        "{%- endfor %}"),
    "qwen_last_query": (
        "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
        "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
        "{%- if ns.multi_step_tool and message.role == 'user' and not (message.content.startswith('<tool_response>') "
        "and message.content.endswith('</tool_response>')) %}{%- set ns.multi_step_tool = false %}"
        "{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
        "{%- for message in messages %}{%- if loop.index0 > ns.last_query_index %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{{- messages[ns.last_query_index].content }}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{%- endif %}"),
    "deepseek_reasoning_split": (
        "{% set ns = namespace(is_first=false, system_prompt='') %}"
        "{%- for message in messages %}{%- if message['role'] == 'system' %}"
        "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
        "{%- for message in messages %}{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
        "{%- elif message['role'] == 'assistant' and message['content'] is not none %}"
        "{% set content = message['content'] %}{% if '</think>' in content %}"
        "{% set content = content.split('</think>')[-1] %}{% endif %}{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}"
        "{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}"),
    "hermes_schema_macro": (
        "{%- macro json_to_python_type(json_spec) %}"
        "{%- set basic_type_map = {'string': 'str', 'number': 'float', 'integer': 'int', 'boolean': 'bool'} %}"
        "{%- if basic_type_map[json_spec.type] is defined %}{{- basic_type_map[json_spec.type] }}"
        "{%- elif json_spec.type == 'array' %}{{- 'list[' + json_to_python_type(json_spec['items']) + ']' }}"
        "{%- elif json_spec.type == 'object' %}{{- 'dict' }}{%- else %}{{- 'Any' }}{%- endif %}{%- endmacro %}"
        "{%- for tool in tools %}{%- set tool = tool.function if tool.function is defined else tool %}"
        "{{- tool.name + '(' }}{%- for param_name, param_fields in tool.parameters.properties|items %}"
        "{{- param_name + ': ' + json_to_python_type(param_fields) }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
        "{%- endfor %}{{- ')' }}"
        "{%- for key in tool.parameters.properties %}{{- ' ' + key + '=' + tool.parameters.properties[key].type }}"
        "{%- endfor %}{%- endfor %}"),
    "gemma_system_folding": (
        "{{ bos_token }}{%- if messages[0]['role'] == 'system' %}"
        "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
        "{%- else %}{%- set first_user_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
        "{%- set sys = messages|selectattr('role', 'equalto', 'system')|list %}"
        "{%- for message in loop_messages %}{%- set role = 'model' if message['role'] == 'assistant' else "
        "message['role'] %}{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
        "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}"),
    "tool_response_window": (
        "{%- for message in messages %}{%- if message.role == 'tool' %}"
        "{%- set start = (message.content|length) - ('</tool>'|length) %}{%- if start < 0 %}{%- set start = 0 %}"
        "{%- endif %}{{- message.content[start:] }}{%- endif %}"
        "{%- set last = messages[loop.index0 - 1] if loop.index0 > 0 else message %}{{- last.role }}"
        "{%- endfor %}{{- messages|map(attribute='role')|join(',') }}"
        "{{- (tools|map(attribute='function')|map(attribute='name')|list)|tojson }}"),
}
