"""Realistic request bodies for each dialect, as SDK keyword arguments (shared by several tests)."""

from __future__ import annotations

from typing import Any

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
TIME_SCHEMA = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
CHAT_URL = "https://api.openai.com/v1/chat/completions"


def anthropic_messages() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": [{"type": "text", "text": "You are a careful travel assistant."}],
        "tools": [
            {"name": "get_weather", "description": "Weather forecast.", "input_schema": WEATHER_SCHEMA},
            {"name": "get_time", "description": "Local time.", "input_schema": TIME_SCHEMA},
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "service_tier": "auto",
        "stop_sequences": ["\n\nHuman:"],
        "metadata": {"user_id": "user-42"},
        "messages": [
            {"role": "user", "content": "What's the weather in Paris for 3 days?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "get_weather",
                        "input": {"city": "Paris", "days": 3, "unit": "celsius"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 21C"}],
            },
            {"role": "user", "content": "Thanks. And should I pack an umbrella?"},
        ],
    }


def openai_chat() -> dict[str, Any]:
    return {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "You are a careful travel assistant."},
            {"role": "user", "content": "What's the weather in Paris for 3 days?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_01",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_01", "content": "Sunny, 21C"},
            {"role": "user", "content": "Thanks. And should I pack an umbrella?"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
            {"type": "function", "function": {"name": "get_time", "parameters": TIME_SCHEMA}},
        ],
        "tool_choice": "auto",
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 7,
        "max_completion_tokens": 300,
        "stop": ["END"],
        "response_format": {"type": "text"},
        "presence_penalty": 0.1,
    }


def openai_responses() -> dict[str, Any]:
    return {
        "model": "gpt-4.1-mini",
        "instructions": "You are a careful travel assistant.",
        "input": [
            {"role": "user", "content": "What's the weather in Paris for 3 days?"},
            {
                "type": "function_call",
                "call_id": "call_01",
                "name": "get_weather",
                "arguments": '{"city": "Paris", "days": 3}',
            },
            {"type": "function_call_output", "call_id": "call_01", "output": "Sunny, 21C"},
            {"role": "user", "content": "Thanks. And should I pack an umbrella?"},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": False},
            {"type": "function", "name": "get_time", "parameters": TIME_SCHEMA, "strict": False},
        ],
        "tool_choice": "auto",
        "temperature": 0.0,
        "top_p": 0.9,
        "max_output_tokens": 300,
    }


#: (provider, SDK method, request factory) for every cached dialect.
DIALECTS = [
    ("anthropic", "messages.create", anthropic_messages),
    ("openai", "chat.completions.create", openai_chat),
    ("openai", "responses.create", openai_responses),
]


def chat_question(question: str, stream: bool = False) -> dict[str, Any]:
    """A Chat body of one question: distinct questions make distinct requests."""
    body: dict[str, Any] = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # a Chat stream reports usage only if asked
    return body
