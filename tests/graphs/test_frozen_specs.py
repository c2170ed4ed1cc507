"""Graph files and graph searches are configs like any other: one frozen base, ``FrozenConfig``.

The graph modules had three copies of the base, without the config base's field docstrings as
schema descriptions; one base gives every spec the same rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

import tts
from tts.config import FrozenConfig
from tts.graphs.graph import GraphSpec, NodeSpec, StageSpec
from tts.graphs.search import GraphSearchConfig
from tts.graphs.search_space import GraphSearchSpace


@pytest.mark.parametrize("model", [NodeSpec, StageSpec, GraphSpec, GraphSearchConfig, GraphSearchSpace])
def test_graph_specs_are_frozen_configs_with_described_fields(model):
    assert issubclass(model, FrozenConfig)
    props = model.model_json_schema()["properties"]
    documented = [name for name in model.model_fields if name in props and model.model_fields[name].description]
    assert documented and all(props[name].get("description") for name in documented)


def test_a_node_spec_refuses_unknown_keys_and_changes():
    node = NodeSpec(role="generator")
    assert NodeSpec.model_json_schema()["properties"]["role"]["description"].startswith("Registered role")
    with pytest.raises(ValidationError, match="extra"):
        NodeSpec(role="generator", rolee="critic")
    with pytest.raises(ValidationError, match="frozen"):
        node.role = "critic"


@pytest.mark.reads_source
def test_the_frozen_base_is_defined_once():
    defined = [str(p.relative_to(Path(tts.__file__).parent)) for p in Path(tts.__file__).parent.rglob("*.py")
               for node in ast.parse(p.read_text(encoding="utf-8")).body
               if isinstance(node, ast.ClassDef) and node.name in ("_Frozen", "FrozenConfig")]
    assert defined == ["config.py"]
