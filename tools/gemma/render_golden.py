#!/usr/bin/env python3
"""Render Gemma 4 chat-template golden files with the reference renderer.

For every case in CASES and every template in tests/fixtures/gemma4/*.jinja this renders the prompt
with transformers' own `render_jinja_template` (the code behind `apply_chat_template`: jinja2
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson and
raise_exception) and, as a cross-check, with a plain jinja2 environment configured the same way.
The two must agree. Outputs:

  tests/fixtures/gemma4/cases.json                      the inputs (messages, tools, flags)
  tests/fixtures/gemma4/golden/<template>/<case>.txt    the rendered prompt, byte for byte

gg-gemma's tests (runtime/gemma/tests/template_golden.rs) render the same inputs with minijinja and
compare byte for byte. Run:  .venv/bin/python tools/gemma/render_golden.py
"""

import json
import pathlib
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "gemma4"

SPECIAL_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "units": {"type": "string", "description": "Temperature units", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

NESTED_TOOL = {
    "type": "function",
    "function": {
        "name": "fill_form",
        "description": "Fill a web form with structured data.",
        "parameters": {
            "type": "object",
            "properties": {
                "selector": {"type": "string", "description": "CSS selector of the form"},
                "submit": {"type": "boolean", "description": "Submit after filling"},
                "retries": {"type": "integer", "description": "How many times to retry", "nullable": True},
                "ratio": {"type": "number"},
                "address": {
                    "type": "object",
                    "description": "Postal address",
                    "properties": {
                        "street": {"type": "string", "description": "Street and number"},
                        "zip": {"type": "string"},
                        "geo": {
                            "type": "object",
                            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                            "required": ["lat", "lon"],
                        },
                    },
                    "required": ["street"],
                },
                "fields": {
                    "type": "array",
                    "description": "Fields to fill",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "description": "Field name"},
                            "value": {"type": "string"},
                            "Kind": {"type": "string", "enum": ["text", "password", "email"]},
                        },
                        "required": ["name", "value"],
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["selector", "fields"],
        },
    },
}

NO_PARAMS_TOOL = {
    "type": "function",
    "function": {"name": "get_page_title", "description": "Return the title of the current page."},
}

EMPTY_PARAMS_TOOL = {
    "type": "function",
    "function": {
        "name": "take_screenshot",
        "description": "Capture the visible part of the page.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CASES = [
    {
        "name": "one_turn",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    },
    {
        "name": "one_turn_no_generation_prompt",
        "add_generation_prompt": False,
        "messages": [{"role": "user", "content": "Hello"}],
    },
    {
        "name": "multi_turn",
        "messages": [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "  Tell me a joke.  \n"},
            {"role": "assistant", "content": "<|channel>thought\nKeep it short.<channel|>Why did the GPU cross the road?"},
            {"role": "user", "content": "Why?"},
        ],
    },
    {
        "name": "system_prompt",
        "messages": [
            {"role": "system", "content": "You are Gemma Gem, a helpful browser assistant.\n"},
            {"role": "user", "content": "Summarise this page."},
        ],
    },
    {
        "name": "unicode_and_whitespace",
        "messages": [
            {"role": "system", "content": "\n  Réponds en français. 日本語 OK 😀  "},
            {"role": "user", "content": "Ça va? «€» \t"},
        ],
    },
    {
        "name": "tools_nested",
        "messages": [
            {"role": "system", "content": "You can use tools."},
            {"role": "user", "content": "Fill the signup form."},
        ],
        "tools": [WEATHER_TOOL, NESTED_TOOL, NO_PARAMS_TOOL, EMPTY_PARAMS_TOOL],
    },
    {
        "name": "tools_without_system",
        "messages": [{"role": "user", "content": "Weather in London?"}],
        "tools": [WEATHER_TOOL],
    },
    {
        "name": "tool_call_pending",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("call_1", "get_weather", {"city": "Paris"})]},
        ],
        "tools": [WEATHER_TOOL],
    },
    {
        "name": "tool_call_and_response",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    tool_call(
                        "call_1",
                        "fill_form",
                        {
                            "selector": "#signup",
                            "submit": True,
                            "retries": 3,
                            "ratio": 0.5,
                            "missing": None,
                            "address": {"street": "1 Rue de Rivoli", "geo": {"lat": 48.85, "lon": 2.35}},
                            "fields": [{"name": "email", "value": "a@b.c"}, {"name": "Pass", "value": "x"}],
                            "tags": ["a", "B", "c"],
                        },
                    )
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"ok\": true, \"filled\": 2}"},
        ],
        "tools": [NESTED_TOOL],
    },
    {
        "name": "tool_response_then_answer",
        "messages": [
            {"role": "user", "content": "Weather in Paris and London?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    tool_call("c1", "get_weather", {"city": "Paris"}),
                    tool_call("c2", "get_weather", {"city": "London", "units": "celsius"}),
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"},
            {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "12 C, rain"},
            {"role": "assistant", "content": "Paris: 18 C and sunny. London: 12 C with rain."},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [WEATHER_TOOL],
    },
    {
        "name": "tool_response_named_only",
        "messages": [
            {"role": "user", "content": "Title?"},
            {"role": "assistant", "tool_calls": [tool_call(None, "get_page_title", {})]},
            {"role": "tool", "name": "get_page_title", "content": "Example Domain"},
        ],
        "tools": [NO_PARAMS_TOOL],
    },
    {
        "name": "tool_response_content_parts",
        "messages": [
            {"role": "user", "content": "Title?"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("t1", "get_page_title", {})]},
            {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "Example "}, {"type": "text", "text": "Domain"}]},
        ],
        "tools": [NO_PARAMS_TOOL],
    },
    {
        "name": "legacy_tool_responses",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "tool_calls": [tool_call("c1", "get_weather", {"city": "Paris"})],
                "tool_responses": [{"name": "get_weather", "response": {"temperature": 18, "sky": "sunny", "Wind": None}}],
            },
        ],
        "tools": [WEATHER_TOOL],
    },
    {
        "name": "thinking_on",
        "enable_thinking": True,
        "messages": [{"role": "user", "content": "Prove that 17 is prime."}],
    },
    {
        "name": "thinking_off",
        "enable_thinking": False,
        "messages": [{"role": "user", "content": "Prove that 17 is prime."}],
    },
    {
        "name": "thinking_with_system_and_tools",
        "enable_thinking": True,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "reasoning": "The user wants the weather; call the tool.",
                "content": "",
                "tool_calls": [tool_call("c1", "get_weather", {"city": "Paris"})],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
        ],
        "tools": [WEATHER_TOOL],
    },
    {
        "name": "thinking_history_stripped",
        "enable_thinking": True,
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "reasoning": "Trivial.", "content": "<|channel>thought\nadd them<channel|>4"},
            {"role": "user", "content": "3+3?"},
        ],
    },
]


CLICK_TOOL = {
    "type": "function",
    "function": {
        "name": "click_element",
        "description": "Click an element of the page.",
        "parameters": {
            "type": "object",
            "properties": {"ref": {"type": "string", "description": "Snapshot ref, e.g. e3"}},
            "required": ["ref"],
        },
    },
}

# What gg_gemma::agent::messages_from_agent makes of an agent conversation (the Rust test builds
# the same conversation with gg_agent types, converts it and compares both the messages and the
# rendering): tool results folded into the calling model message as `tool_responses`.
CASES.append(
    {
        "name": "agent_conversation",
        "enable_thinking": True,
        "tools": [WEATHER_TOOL, CLICK_TOOL],
        "messages": [
            {"role": "system", "content": "You are Gemma Gem."},
            {"role": "user", "content": "What's the weather in Paris? Then click OK."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                "reasoning": "Need the weather first.",
                "tool_responses": [{"name": "get_weather", "response": {"temperature": 18, "sky": "sunny", "Wind": None}}],
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "click_element", "arguments": {"ref": "e3"}}}],
                "tool_responses": [{"name": "click_element", "response": {"clicked": True}}],
            },
            {"role": "assistant", "content": "It is 18 C and sunny; I clicked OK."},
            {"role": "user", "content": "Thanks!"},
        ],
    }
)


def transformers_render(template: str, case: dict) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    kwargs = dict(SPECIAL_TOKENS)
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    rendered, _ = render_jinja_template(
        conversations=[case["messages"]],
        tools=case.get("tools"),
        chat_template=template,
        add_generation_prompt=case.get("add_generation_prompt", True),
        **kwargs,
    )
    return rendered[0]


def jinja2_render(template: str, case: dict) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    ctx = dict(SPECIAL_TOKENS)
    if "enable_thinking" in case:
        ctx["enable_thinking"] = case["enable_thinking"]
    return env.from_string(template).render(
        messages=case["messages"],
        tools=case.get("tools"),
        documents=None,
        add_generation_prompt=case.get("add_generation_prompt", True),
        **ctx,
    )


def main() -> int:
    templates = sorted(FIX.glob("*.jinja"))
    if not templates:
        print(f"no templates in {FIX}", file=sys.stderr)
        return 1
    (FIX / "cases.json").write_text(json.dumps(CASES, indent=2, ensure_ascii=False) + "\n")
    for tpath in templates:
        template = tpath.read_text()
        out_dir = FIX / "golden" / tpath.stem
        out_dir.mkdir(parents=True, exist_ok=True)
        for case in CASES:
            try:
                a = transformers_render(template, case)
            except ImportError:
                a = None
            b = jinja2_render(template, case)
            if a is not None and a != b:
                print(f"{tpath.name}/{case['name']}: transformers and jinja2 disagree", file=sys.stderr)
                return 1
            (out_dir / f"{case['name']}.txt").write_bytes(b.encode("utf-8"))
        print(f"{tpath.name}: {len(CASES)} cases -> {out_dir.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
