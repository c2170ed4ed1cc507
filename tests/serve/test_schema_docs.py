"""Every field a client reads about in a schema is described (issue 49): /openapi.json of ``tts
serve`` and the ``solve`` tool's input and output schemas of ``tts mcp`` carry each field's
docstring as its ``description``, so generated clients, API browsers and agents see what a field
means, its unit and its range, not a bare name."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.session import Session

pytestmark = pytest.mark.timeout(60)

FASTAPI_OWN = {"HTTPValidationError", "ValidationError"}
"""FastAPI's own components (its 422 shape, declared for a route with a path parameter); tts does
not define them."""


def undescribed(schema: Any, where: str) -> list[str]:
    """The paths of the properties, anywhere in ``schema`` (components, $defs, inline objects,
    anyOf branches), that have no non-empty description."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                found += [f"{path}.{name}" for name, prop in props.items()
                          if not (isinstance(prop, dict) and str(prop.get("description") or "").strip())]
            stack += [(v, f"{path}/{k}") for k, v in node.items() if k not in FASTAPI_OWN]
        elif isinstance(node, list):
            stack += [(v, f"{path}[{i}]") for i, v in enumerate(node)]
    return sorted(found)


@pytest.fixture(scope="module")
def session():
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as="smollm2-135m", max_tokens=256) as s:
        yield s


def test_every_field_of_the_openapi_schema_is_described(session) -> None:
    schema = create_app(session, ServeConfig(model="scripted", prompt="math")).openapi()
    components = schema["components"]["schemas"]
    assert {"ChatRequest", "TTSOptions", "ChatCompletion", "ChoiceExtension", "CompletionUsage", "StreamChunk"} <= set(components)
    assert undescribed(schema, "openapi") == []
    # the docstring is the description, word for word (not a second copy that could drift)
    assert components["TTSOptions"]["properties"]["answer_only"]["description"] == (
        "Reply with the answer alone instead of the chosen sample's full text.")


def test_every_field_of_the_mcp_tool_schemas_is_described(session) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from tts.serve.mcp import create_mcp_server

    server = create_mcp_server(session, ServeConfig(model="scripted", prompt="math"))

    async def tools() -> list[Any]:
        async with Client(server) as client:
            return (await client.list_tools()).tools

    (solve,) = asyncio.run(tools())
    assert set(solve.input_schema["properties"]) >= {"question", "strategy", "n", "budget"}
    assert set(solve.output_schema["properties"]) >= {"answer", "confidence", "cost"}
    assert undescribed(solve.input_schema, "input") == []
    assert undescribed(solve.output_schema, "output") == []


def test_the_check_finds_an_undescribed_field() -> None:
    schema = {"properties": {"a": {"type": "string", "description": "A."}, "b": {"type": "integer"}},
              "$defs": {"Inner": {"properties": {"c": {"anyOf": [{"properties": {"d": {"description": " "}}}]}}}}}
    assert undescribed(schema, "s") == ["s.b", "s/$defs/Inner.c", "s/$defs/Inner/properties/c/anyOf[0].d"]
