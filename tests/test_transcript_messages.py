"""OpenAI-style conversations as prompt text (chat templates with llama-server's polyfills,
the plain transcript for base models) and the segment map of a prompt. Pure: no model.

The templates are shaped after real ones: ChatML, Qwen2.5 (writes the tools itself),
Gemma 2 (refuses a system role and roles that do not alternate), Qwen3 (strips earlier
replies' <think>), an Ollama-style Llama 3.1 (tools in the last user message) and a
Llama 3.2-style header that stamps today's date.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from effctx_core.contract import ModelFacts
from effctx_core.transcript import (
    PLAIN_TRANSCRIPT,
    ChatTemplateError,
    TemplateFormat,
    chat_format_report,
    compile_template,
)
from effctx_core.transcript_messages import (
    OBJECT_ARGUMENTS,
    SYSTEM_INTO_USER,
    TOOL_CALLS_AS_TEXT,
    TOOL_RESPONSES_AS_USER,
    TOOLS_IN_SYSTEM,
    CharSegment,
    CharSegmentMap,
    Message,
    RenderedPrompt,
    plain_renderer,
    render_messages,
    render_plain,
    segment_at,
    segment_map,
    template_facts,
    template_renderer,
    tool_instructions,
    with_tool_instructions,
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
QWEN3 = """{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and reasoning_content %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
LLAMA31_LAST_USER_TOOLS = """{{- bos_token }}
{%- set ns = namespace(last_user=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}
    {%- if tools and loop.index0 == ns.last_user %}
        {{- 'Given the following functions, respond with a JSON for a function call.\\n\\n' }}
        {%- for tool in tools %}
            {{- tool | tojson(indent=4) + '\\n\\n' }}
        {%- endfor %}
    {%- endif %}
    {%- if message.tool_calls %}
        {%- for tool_call in message.tool_calls %}
            {{- '<|python_tag|>{"name": "' + tool_call.function.name + '", "parameters": ' + tool_call.function.arguments | tojson + '}' }}
        {%- endfor %}
        {{- '<|eom_id|>' }}
    {%- else %}
        {{- message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
DATED = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: ' + date_string + '<|eot_id|>' }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
MISTRAL_TOOLS = "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS]{% endif %}{{ m.content }}{% endfor %}"

WEATHER: Message = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather <now> & 'here', in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK: Message = {"type": "function", "function": {"name": "get_time", "description": "The time.",
                                                   "parameters": {"type": "object", "properties": {}}}}
WEATHER_JSON = json.dumps(WEATHER, ensure_ascii=False)
TOOL_BLOCK = (
    "# Tools\nYou may call one or more functions. Function signatures, one JSON object a line:\n<tools>\n"
    f"{WEATHER_JSON}\n</tools>\n"
    'To call a function, reply with <tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>'
)
QWEN25_TOOLS = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{WEATHER_JSON}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def system(text: str) -> Message:
    return {"role": "system", "content": text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str | None, *calls: Message) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool(call_id: str, text: str, name: str | None = None) -> Message:
    message: Message = {"role": "tool", "tool_call_id": call_id, "content": text}
    if name is not None:
        message["name"] = name
    return message


PARIS = call("call_1", "get_weather", {"city": "Paris"})
TOOL_ROUND = [system("Be brief."), user("Weather in Paris?"), assistant(None, PARIS),
              tool("call_1", "18 C", name="get_weather"), tool("call_2", "sunny")]


def render(source: str, messages: list[Message], tools: list[Message] | None = None, **options: Any) -> Any:
    options = {"bos_token": "<bos>", "eos_token": "<eos>", "strip_bos": True, **options}
    return render_messages(source, messages, tools=tools, **options)


def renderer(source: str, tools: list[Message] | None = None) -> Any:
    return template_renderer(source, tools=tools, bos_token="<bos>", eos_token="<eos>", strip_bos=True)


def pieces(text: str, smap: CharSegmentMap) -> list[tuple[str, int | None, str | None, str]]:
    return [(s.label, s.index, s.role, text[s.start:s.end]) for s in smap.segments]


# --------------------------------------------------------------------------- the template environment


def test_tojson_writes_a_tool_schema_as_json_dumps_does_without_html_escapes() -> None:
    assert compile_template("{{ tool | tojson }}").render(tool=WEATHER) == WEATHER_JSON


def test_tojson_takes_the_indent_transformers_templates_pass() -> None:
    assert compile_template("{{ tool | tojson(indent=4) }}").render(tool=WEATHER) == json.dumps(
        WEATHER, ensure_ascii=False, indent=4)


def test_a_generation_tag_renders_its_body() -> None:
    source = "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    assert compile_template(source).render(messages=[user("a"), user("b")]) == "[a][b]"


def test_a_template_with_generation_tags_is_cut_into_turns_as_without_them() -> None:
    tagged = CHATML.replace("{{ m.content }}", "{% generation %}{{ m.content }}{% endgeneration %}")
    model = ModelFacts(
        path="model.gguf", name="model", architecture="llama", file_bytes=0, sha256="0" * 64,
        n_layers=2, n_head=4, n_head_kv=2, head_dim_k=32, head_dim_v=32, n_embd=128,
        context_length=2048, sliding_window=None, global_layers=(0, 1), global_layers_rule="all",
        vocab_size=256, bos_token_id=1, eos_token_id=2, add_bos=True, chat_template=tagged,
    )
    fmt, why = chat_format_report(model)
    assert isinstance(fmt, TemplateFormat), why
    assert fmt.render_turn("Hello", first=True) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


# --------------------------------------------------------------------------- rendering with a template


def test_a_chatml_conversation_renders_as_the_template_writes_it() -> None:
    assert render(CHATML, [system("Be brief."), user("Hi")]).text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_a_conversation_the_template_takes_as_it_is_needs_no_polyfill() -> None:
    assert render(CHATML, [system("Be brief."), user("Hi")]).polyfills == ()


def test_the_template_gets_tools_tool_choice_and_the_token_texts() -> None:
    source = "{{ bos_token }}|{{ eos_token }}|{{ tool_choice }}|{{ tools | length }}|{{ add_generation_prompt }}"
    assert render(source, [user("Hi")], [WEATHER], tool_choice="auto", strip_bos=False).text == "<bos>|<eos>|auto|1|True"


def test_without_a_generation_prompt_the_text_ends_with_the_last_message() -> None:
    assert render(CHATML, [user("Hi")], add_generation_prompt=False).text == "<|im_start|>user\nHi<|im_end|>\n"


def test_one_leading_bos_goes_when_the_tokenizer_adds_it() -> None:
    source = "{{ bos_token }}{{ bos_token }}" + CHATML
    assert render(source, [user("Hi")]).text.startswith("<bos><|im_start|>user\n")
    assert render(source, [user("Hi")], strip_bos=False).text.startswith("<bos><bos><|im_start|>user\n")


def test_a_system_message_the_template_refuses_is_folded_into_the_first_user_message() -> None:
    assert render(GEMMA2, [system("Be brief."), user("Hi")]) == RenderedPrompt(
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n", (SYSTEM_INTO_USER,))


def test_tool_calls_and_results_a_template_cannot_take_become_hermes_text() -> None:
    rendered = render(GEMMA2, [user("Weather in Paris?"), assistant(None, PARIS),
                               tool("call_1", "18 C"), tool("call_2", "sunny")])
    assert rendered.text == (
        "<start_of_turn>user\nWeather in Paris?<end_of_turn>\n"
        '<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><end_of_turn>\n'
        "<start_of_turn>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\nsunny\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n")
    assert rendered.polyfills == (TOOL_CALLS_AS_TEXT, TOOL_RESPONSES_AS_USER)


def test_a_reply_with_text_and_tool_calls_keeps_its_text_first() -> None:
    rendered = render(GEMMA2, [user("Weather?"), assistant("Checking.", PARIS)], add_generation_prompt=False)
    assert rendered.text.endswith(
        '<start_of_turn>model\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><end_of_turn>\n")


def test_a_template_that_does_not_write_tools_gets_them_in_the_system_message() -> None:
    rendered = render(CHATML, [system("Be brief."), user("Hi")], [WEATHER])
    assert rendered.text == (f"<|im_start|>system\nBe brief.\n\n{TOOL_BLOCK}<|im_end|>\n"
                             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.polyfills == (TOOLS_IN_SYSTEM,)


def test_every_polyfill_a_tool_round_needs_on_gemma_is_reported_in_order() -> None:
    assert render(GEMMA2, TOOL_ROUND, [WEATHER]).polyfills == (
        TOOLS_IN_SYSTEM, TOOL_CALLS_AS_TEXT, TOOL_RESPONSES_AS_USER, SYSTEM_INTO_USER)


def test_a_template_that_writes_tools_gets_them_itself() -> None:
    rendered = render(QWEN25, [system("Be brief."), user("Hi")], [WEATHER])
    assert rendered.text == (f"<|im_start|>system\nBe brief.{QWEN25_TOOLS}<|im_end|>\n"
                             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.polyfills == ()


def test_arguments_a_template_only_writes_as_an_object_are_parsed_for_it() -> None:
    rendered = render(QWEN25, [user("Weather?"), assistant(None, PARIS)], [WEATHER], add_generation_prompt=False)
    assert rendered.text.endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n')
    assert rendered.polyfills == (OBJECT_ARGUMENTS,)


def test_a_conversation_the_template_still_refuses_raises_its_one_line_message() -> None:
    with pytest.raises(ChatTemplateError) as refused:
        render(GEMMA2, [user("Hi"), user("Again")])
    assert str(refused.value) == "Conversation roles must alternate user/assistant/user/assistant/..."


def test_a_template_that_does_not_compile_raises_a_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match="^TemplateSyntaxError: "):
        render("{% for m in messages %}", [user("Hi")])


def test_the_messages_given_are_not_changed() -> None:
    messages = [system("Be brief."), user("Weather?"), assistant(None, PARIS), tool("call_1", "18 C")]
    before = json.dumps(messages)
    render(GEMMA2, messages, [WEATHER])
    assert json.dumps(messages) == before


# --------------------------------------------------------------------------- template facts


def test_a_template_that_writes_the_tool_schemas_renders_tools() -> None:
    assert (template_facts(QWEN25).renders_tools, template_facts(CHATML).renders_tools) == (True, False)


def test_a_template_that_calls_strftime_now_stamps_the_date() -> None:
    assert (template_facts(DATED).stamps_date, template_facts(CHATML).stamps_date) == (True, False)


def test_strftime_now_writes_today() -> None:
    before = datetime.now().strftime("%d %b %Y")
    text = render(DATED, [user("Hi")]).text
    assert f"Today Date: {before}" in text or f"Today Date: {datetime.now().strftime('%d %b %Y')}" in text


def test_the_tool_format_is_read_from_the_source() -> None:
    formats = [template_facts(source).tool_format for source in (QWEN25, LLAMA31_LAST_USER_TOOLS, MISTRAL_TOOLS, CHATML)]
    assert formats == ["hermes", "llama3_json", "mistral", "hermes"]


def test_the_probes_find_what_gemma_2_cannot_take() -> None:
    gemma = template_facts(GEMMA2)
    assert (gemma.supports_system_role, gemma.supports_tool_calls, gemma.supports_tool_responses) == (False, False, False)


def test_the_probes_find_that_qwen_writes_arguments_only_as_objects() -> None:
    qwen = template_facts(QWEN25)
    assert (qwen.supports_tool_calls, qwen.requires_object_arguments, qwen.supports_tool_responses) == (True, True, True)


# --------------------------------------------------------------------------- tool instructions


def test_the_tool_block_goes_at_the_end_of_the_system_message() -> None:
    assert with_tool_instructions([system("Be brief."), user("Hi")], [WEATHER]) == [
        system(f"Be brief.\n\n{TOOL_BLOCK}"), user("Hi")]


def test_a_conversation_without_a_system_message_gets_one_for_the_tools() -> None:
    assert with_tool_instructions([user("Hi")], [WEATHER]) == [system(TOOL_BLOCK), user("Hi")]


def test_the_tool_block_keeps_the_tools_order_and_their_text() -> None:
    assert tool_instructions([CLOCK, WEATHER]).splitlines()[3:5] == [
        '{"type": "function", "function": {"name": "get_time", "description": "The time.", '
        '"parameters": {"type": "object", "properties": {}}}}',
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & \'here\', in °C", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}']


def test_the_tool_block_is_the_same_for_the_same_tools() -> None:
    assert tool_instructions([json.loads(WEATHER_JSON)]) == tool_instructions([WEATHER])


def test_adding_the_tool_block_twice_adds_it_once() -> None:
    once = with_tool_instructions([system("Be brief."), user("Hi")], [WEATHER])
    assert with_tool_instructions(once, [WEATHER]) == once


def test_without_tools_the_messages_are_a_copy_as_they_were() -> None:
    messages = [user("Hi")]
    copied = with_tool_instructions(messages, None)
    assert copied == messages and copied is not messages


# --------------------------------------------------------------------------- the plain transcript


def test_a_first_user_message_renders_as_the_engines_first_turn() -> None:
    assert render_plain([user("  Hello there \n")]) == PLAIN_TRANSCRIPT.render_turn("  Hello there \n", first=True)


def test_a_resent_reply_and_the_next_message_render_as_the_engines_turns_put_them_on_the_tape() -> None:
    reply = " Hello! How can I help?"
    assert render_plain([user("Hi"), assistant(reply), user(" Bye ")]) == (
        PLAIN_TRANSCRIPT.render_turn("Hi", first=True) + reply + PLAIN_TRANSCRIPT.render_turn(" Bye ", first=False))


def test_the_system_text_comes_first() -> None:
    assert render_plain([system(" Be brief. "), user("Hi")]) == "Be brief.\n\nUser: Hi\nAssistant:"


def test_the_tool_block_comes_with_the_system_text() -> None:
    assert render_plain([system("Be brief."), user("Hi")], [WEATHER]) == (
        f"Be brief.\n\n{TOOL_BLOCK}\n\nUser: Hi\nAssistant:")


def test_tool_calls_and_results_render_in_the_plain_transcript() -> None:
    assert render_plain([user("Weather?"), assistant(" Checking.", PARIS), tool("call_1", " 18 C ", name="get_weather"),
                         tool("call_2", "sunny")]) == (
        'User: Weather?\nAssistant: Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        "\nTool (get_weather): 18 C\nAssistant:\nTool (call_2): sunny\nAssistant:")


def test_without_a_generation_prompt_the_plain_transcript_ends_with_the_last_message() -> None:
    assert render_plain([user("Hi")], add_generation_prompt=False) == "User: Hi"


def test_a_conversation_that_ends_with_a_reply_is_continued_not_answered() -> None:
    assert render_plain([user("Hi"), assistant(" Hel")]) == "User: Hi\nAssistant: Hel"


# --------------------------------------------------------------------------- segment maps


def test_a_chatml_prompt_is_cut_into_its_messages_and_the_generation_prompt() -> None:
    messages = [system("Be brief."), user("Hi"), assistant("Hello"), user("Bye")]
    smap = segment_map(renderer(CHATML), messages, has_tools=False)
    assert pieces(render(CHATML, messages).text, smap) == [
        ("system", 0, "system", "<|im_start|>system\nBe brief.<|im_end|>\n"),
        ("message 1 (user)", 1, "user", "<|im_start|>user\nHi<|im_end|>\n"),
        ("message 2 (assistant)", 2, "assistant", "<|im_start|>assistant\nHello<|im_end|>\n"),
        ("message 3 (user)", 3, "user", "<|im_start|>user\nBye<|im_end|>\n"),
        ("generation prompt", None, None, "<|im_start|>assistant\n"),
    ]


def test_the_segments_cover_the_prompt_exactly() -> None:
    text = render(GEMMA2, TOOL_ROUND, [WEATHER]).text
    smap = segment_map(renderer(GEMMA2, [WEATHER]), TOOL_ROUND, has_tools=True)
    assert [(a.end, b.start) for a, b in zip(smap.segments, smap.segments[1:]) if a.end != b.start] == []
    assert (smap.segments[0].start, smap.segments[-1].end) == (0, len(text))
    assert all(s.start < s.end for s in smap.segments)


def test_tools_the_template_writes_are_cut_out_of_the_system_message() -> None:
    messages = [system("Be brief."), user("Hi")]
    smap = segment_map(renderer(QWEN25, [WEATHER]), messages, has_tools=True)
    assert pieces(render(QWEN25, messages, [WEATHER]).text, smap)[:3] == [
        ("system", 0, "system", "<|im_start|>system\nBe brief."),
        ("tools", None, None, QWEN25_TOOLS),
        ("system", 0, "system", "<|im_end|>\n"),
    ]


def test_tools_put_in_the_system_message_are_a_segment_of_their_own() -> None:
    messages = [system("Be brief."), user("Hi")]
    smap = segment_map(renderer(CHATML, [WEATHER]), messages, has_tools=True)
    text = render(CHATML, messages, [WEATHER]).text
    assert smap.tools is not None
    assert text[smap.tools[0]:smap.tools[1]] == f"\n\n{TOOL_BLOCK}"
    assert [s.label for s in smap.segments] == ["system", "tools", "system", "message 1 (user)", "generation prompt"]


def test_a_default_system_prompt_the_template_writes_is_its_head() -> None:
    smap = segment_map(renderer(QWEN25), [user("Hi")], has_tools=False)
    assert pieces(render(QWEN25, [user("Hi")]).text, smap) == [
        ("template", None, None,
         "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"),
        ("message 0 (user)", 0, "user", "<|im_start|>user\nHi<|im_end|>\n"),
        ("generation prompt", None, None, "<|im_start|>assistant\n"),
    ]


def test_a_template_that_renders_prefixes_as_prefixes_rerenders_nothing() -> None:
    messages = [system("Be brief."), user("Hi"), assistant("Hello"), user("Bye")]
    assert segment_map(renderer(CHATML), messages, has_tools=False).rerenders is None


def test_stripping_an_earlier_think_is_a_rerender_of_that_reply() -> None:
    messages = [user("Hi"), assistant("<think>\nPonder.\n</think>\n\nHello!"), user("Again"),
                assistant("<think>\nMore.\n</think>\n\nSure."), user("Bye")]
    assert segment_map(renderer(QWEN3), messages, has_tools=False).rerenders == 1


def test_a_stripped_reply_keeps_its_own_segment() -> None:
    messages = [user("Hi"), assistant("<think>\nPonder.\n</think>\n\nHello!"), user("Bye")]
    smap = segment_map(renderer(QWEN3), messages, has_tools=False)
    assert pieces(render(QWEN3, messages).text, smap) == [
        ("message 0 (user)", 0, "user", "<|im_start|>user\nHi<|im_end|>\n"),
        ("message 1 (assistant)", 1, "assistant", "<|im_start|>assistant\nHello!<|im_end|>\n"),
        ("message 2 (user)", 2, "user", "<|im_start|>user\nBye<|im_end|>\n"),
        ("generation prompt", None, None, "<|im_start|>assistant\n"),
    ]


def test_tools_that_move_to_the_last_user_message_are_a_rerender_of_the_first_one() -> None:
    messages = [system("Be brief."), user("Hi"), assistant("Hello"), user("Weather?")]
    smap = segment_map(renderer(LLAMA31_LAST_USER_TOOLS, [WEATHER]), messages, has_tools=True)
    assert smap.rerenders == 1
    assert [s.label for s in smap.segments] == [
        "system", "message 1 (user)", "message 2 (assistant)", "message 3 (user)", "tools", "message 3 (user)",
        "generation prompt"]


def test_a_folded_system_message_is_not_a_rerender() -> None:
    messages = [system("Be brief."), user("Hi"), assistant("Hello"), user("Bye")]
    smap = segment_map(renderer(GEMMA2), messages, has_tools=False)
    assert smap.rerenders is None
    assert pieces(render(GEMMA2, messages).text, smap)[:2] == [
        ("system", 0, "system", "<start_of_turn>user\nBe brief."),
        ("message 1 (user)", 1, "user", "\n\nHi<end_of_turn>\n"),
    ]


def test_merged_tool_results_each_keep_a_segment() -> None:
    smap = segment_map(renderer(QWEN25, [WEATHER]), TOOL_ROUND, has_tools=True)
    text = render(QWEN25, TOOL_ROUND, [WEATHER]).text
    assert pieces(text, smap)[-3:] == [
        ("message 3 (tool)", 3, "tool", "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>"),
        ("message 4 (tool)", 4, "tool", "\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"),
        ("generation prompt", None, None, "<|im_start|>assistant\n"),
    ]


def test_a_plain_transcript_is_cut_into_its_turns() -> None:
    messages = [system("Be brief."), user("Hi"), assistant(" Hello"), user("Bye")]
    smap = segment_map(plain_renderer([WEATHER]), messages, has_tools=True)
    assert pieces(render_plain(messages, [WEATHER]), smap) == [
        ("system", 0, "system", "Be brief."),
        ("tools", None, None, f"\n\n{TOOL_BLOCK}"),
        ("system", 0, "system", "\n\n"),
        ("message 1 (user)", 1, "user", "User: Hi"),
        ("message 2 (assistant)", 2, "assistant", "\nAssistant: Hello"),
        ("message 3 (user)", 3, "user", "\nUser: Bye"),
        ("generation prompt", None, None, "\nAssistant:"),
    ]


def test_the_map_renders_each_prefix_once() -> None:
    calls: list[tuple[int, bool, bool]] = []
    plain = plain_renderer([WEATHER])

    def counting(messages: list[Message], add_generation_prompt: bool, with_tools: bool) -> str:
        calls.append((len(messages), add_generation_prompt, with_tools))
        return plain(messages, add_generation_prompt, with_tools)

    segment_map(counting, [user("Hi"), assistant(" Hello"), user("Bye")], has_tools=True)
    assert sorted(calls) == [(0, False, True), (1, False, True), (2, False, True), (3, False, True),
                             (3, True, False), (3, True, True)]


def test_segment_at_finds_the_segment_holding_an_index() -> None:
    segments = (CharSegment("system", 0, "system", 0, 5), CharSegment("tools", None, None, 5, 9))
    found = [segment_at(segments, i) for i in (0, 4, 5, 8, 9, -1)]
    assert [s.label if s else None for s in found] == ["system", "system", "tools", "tools", None, None]
