"""A request's JSON schema may not point outside itself: the engine's grammar compiler must never be
asked to fetch a URL or read a file on the client's behalf."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tts.serve.protocol import ResponseFormat


def _format(schema):
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.parametrize("ref", ["https://attacker.example/s.json", "file:///etc/passwd", "other.json#/a",
                                 "/etc/passwd"])
def test_a_reference_outside_the_schema_is_refused_with_what_to_do(ref):
    schema = {"type": "object", "properties": {"a": {"items": [{"$ref": ref}]}}}
    with pytest.raises(ValidationError) as info:
        ResponseFormat.model_validate(_format(schema))
    text = str(info.value)
    assert "refers outside itself" in text and "#/$defs/name" in text and ref[:20] in text


def test_local_references_are_kept():
    schema = {"$defs": {"city": {"type": "string"}}, "type": "object",
              "properties": {"home": {"$ref": "#/$defs/city"}, "self": {"$dynamicRef": "#meta"}}}
    fmt = ResponseFormat.model_validate(_format(schema))
    assert '"#/$defs/city"' in fmt.schema_text()
