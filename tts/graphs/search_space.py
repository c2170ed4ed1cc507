"""The space of a graph search: categorical decisions (depth, width, samples, roles, models) that
decode to ordinary, validated graph specs; and what two graphs being "the same" means.

A choice decodes to a layered graph (mixture-of-agents style): ``depth`` layers of ``width``
nodes; the first layer's nodes are generators drawing ``samples`` each, each later node reads
every node of the layer before (its counterpart first, which a reviser revises), and an output
node reads the whole last layer. See :mod:`tts.graphs.search` for the search itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from tts.config import FrozenConfig
from tts.graphs.graph import POLICY, GraphError, GraphSpec, parse_graph
from tts.registry import ROLES

Choice = dict[str, Any]
"""One value per decision of a space (decision name -> chosen value)."""


class GraphSearchSpace(FrozenConfig):
    """The graphs a search may pick: layered graphs whose shape, roles and models are decisions."""

    name: str = Field("searched", pattern=r"^[A-Za-z0-9_.-]+$")
    """Stem of the sampled graphs' names (``NAME-<digest>``)."""
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The configured models, as a graph file's ``models:`` section (name -> backend settings)."""
    node_models: tuple[str, ...] = (POLICY,)
    """Models a node may run on: ``policy`` and names from ``models``."""
    output_models: tuple[str, ...] | None = None
    """Models the output node may run on (None: ``node_models``); e.g. only the strong model as the
    final fuser, which keeps a search over a slow second model affordable."""
    depths: tuple[int, ...] = (1, 2)
    """Numbers of layers to choose from: the first layer generates, later ones refine."""
    widths: tuple[int, ...] = (1, 2, 3)
    """Parallel nodes per layer to choose from."""
    samples: tuple[int, ...] = (1, 2, 4)
    """Samples per first-layer generator (its ``n``) to choose from."""
    layer_roles: tuple[Literal["fuser", "reviser"], ...] = ("fuser", "reviser")
    """Roles a later layer may play: fuser (reads every solution before it) or reviser (revises its
    counterpart's solutions, reading the others as peers)."""
    outputs: tuple[Literal["voter", "fuser", "ranker", "verifier"], ...] = ("voter", "fuser")
    """Roles of the output node, which reads every node of the last layer."""

    @model_validator(mode="after")
    def _check(self) -> GraphSearchSpace:
        for field_name in ("node_models", "depths", "widths", "samples", "layer_roles", "outputs"):
            values = getattr(self, field_name)
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{field_name}: give at least one choice and no repeats (got {list(values)})")
        if self.output_models is not None and (not self.output_models
                                               or len(set(self.output_models)) != len(self.output_models)):
            raise ValueError(f"output_models: give at least one choice and no repeats (got {list(self.output_models)})")
        unknown = [m for m in (*self.node_models, *(self.output_models or ())) if m != POLICY and m not in self.models]
        if unknown:
            raise ValueError(f"node_models: {', '.join(unknown)} not configured; add them to models: or choose "
                             f"from {', '.join([POLICY, *self.models])}")
        for field_name, low, high in (("depths", 1, 4), ("widths", 1, 8), ("samples", 1, 64)):
            bad = [v for v in getattr(self, field_name) if not low <= v <= high]
            if bad:
                raise ValueError(f"{field_name}: {bad} outside {low}..{high}; choose values in that range")
        return self

    def decisions(self) -> dict[str, tuple[Any, ...]]:
        """Every decision and its choices (some are used only by deeper or wider graphs)."""
        out: dict[str, tuple[Any, ...]] = {"depth": self.depths, "width": self.widths, "samples": self.samples,
                                           "output": self.outputs}
        out.update({f"role_{layer}": self.layer_roles for layer in range(1, max(self.depths))})
        out.update({f"model_{layer}_{i}": self.node_models
                    for layer in range(max(self.depths)) for i in range(max(self.widths))})
        out["model_out"] = self.output_models or self.node_models
        return out

    def active(self, choice: Choice) -> list[str]:
        """The decisions the graph of ``choice`` depends on (the others are ignored by :meth:`build`)."""
        depth, width = choice["depth"], choice["width"]
        names = ["depth", "width", "samples", "output", *(f"role_{layer}" for layer in range(1, depth))]
        names += [f"model_{layer}_{i}" for layer in range(depth) for i in range(width)]
        if ROLES.load(choice["output"]).uses_model:
            names.append("model_out")
        return names

    def build(self, choice: Choice) -> GraphSpec:
        """The validated graph of one choice.

        Raises:
            GraphError: The space produced a graph the loader refuses (names the node).
        """
        nodes: dict[str, dict[str, Any]] = {}
        previous: list[str] = []
        for layer in range(choice["depth"]):
            names = [f"l{layer}_{i}" for i in range(choice["width"])]
            for i, name in enumerate(names):
                if layer == 0:
                    node: dict[str, Any] = {"role": "generator", "n": choice["samples"]}
                else:  # its counterpart first (a reviser revises it), then the rest of the layer
                    node = {"role": choice[f"role_{layer}"],
                            "inputs": [previous[i], *previous[:i], *previous[i + 1:]]}
                if choice[f"model_{layer}_{i}"] != POLICY:
                    node["model"] = choice[f"model_{layer}_{i}"]
                nodes[name] = node
            previous = names
        nodes["out"] = {"role": choice["output"], "inputs": previous}
        if ROLES.load(choice["output"]).uses_model and choice["model_out"] != POLICY:
            nodes["out"]["model"] = choice["model_out"]
        used = {n["model"] for n in nodes.values() if "model" in n}
        body = {"models": {m: self.models[m] for m in self.models if m in used}, "nodes": nodes}
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
        return parse_graph({"name": f"{self.name}-{digest}", **body}, f"search space {self.name!r}")


def load_search_space(path: Path | str) -> GraphSearchSpace:
    """Read a search space from YAML (the fields of :class:`GraphSearchSpace`).

    Raises:
        GraphError: A missing file, invalid YAML or an invalid space (names the field).
    """
    import yaml
    from pydantic import ValidationError

    path = Path(path)
    if not path.is_file():
        raise GraphError(f"search space file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
        return GraphSearchSpace.model_validate(data if data is not None else {})
    except yaml.YAMLError as exc:
        raise GraphError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "space"
        raise GraphError(f"{path}: {where}: {first['msg']}") from None


def canonical_key(spec: GraphSpec) -> str:
    """What makes two graphs the same graph: everything but the name and description."""
    return json.dumps(spec.model_dump(mode="json", exclude={"name", "description"}), sort_keys=True)


def graph_yaml(spec: GraphSpec) -> str:
    """The graph as a YAML file that :func:`~tts.graphs.graph.load_graph_file` loads again."""
    import yaml

    data = spec.model_dump(mode="json", exclude_defaults=True)
    data["name"] = spec.name
    return yaml.safe_dump(data, sort_keys=False)


def expected_requests(spec: GraphSpec) -> float:
    """Generation requests one problem costs on ``spec`` (from each role's shape; for budgets)."""
    import networkx as nx

    solutions: dict[str, float] = {}
    total = 0.0
    for name in nx.topological_sort(spec.digraph()):
        node = spec.nodes[name]
        seen = sum(solutions.get(src, 0.0) for src in spec.node_inputs(name))
        first = solutions.get(spec.node_inputs(name)[0], 0.0) if spec.node_inputs(name) else 0.0
        requests, out = {
            "generator": (1.0, float(node.n)), "fuser": (1.0, float(node.n)),
            "reviser": (first, first * node.n), "critic": (seen, 0.0), "verifier": (seen, seen),
            "ranker": (1.0, min(seen, node.max_candidates)), "voter": (0.0, 1.0),
        }.get(node.role, (1.0, float(node.n)))
        solutions[name] = out
        total += requests
    return total
