"""The collaboration-graph file: its pydantic schema, and the validated networkx DiGraph it builds.

A graph file (YAML) names its nodes; each node has a role (``tts.registry.ROLES``), a model (the
run's policy by default, or a name from the file's ``models:`` section) and role settings; a node's
``inputs`` (and the optional ``edges:`` list) are edges from other nodes, whose outputs it reads::

    name: sample_then_fuse
    nodes:
      sample: {role: generator, n: 4}
      fuse: {role: fuser, inputs: [sample], temperature: 0}

Everything a run could trip over later is refused when the file loads, with the node named:
cycles, inputs from (or edges to) undefined nodes, unknown roles, models that are not configured,
inputs a role cannot take, settings a role would ignore, prompt overrides with unknown fields.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import networkx as nx
from pydantic import Field, ValidationError, field_validator, model_validator

from tts.config import FrozenConfig
from tts.search.base import StrategyInputError

POLICY = "policy"
"""The model name every node has unless it says otherwise: the run's own model and backend."""


class GraphError(StrategyInputError):
    """A collaboration graph that cannot run; the message names the node (or model) and what to change."""


class NodeSpec(FrozenConfig):
    """One node of a graph file: a role played by a model on the outputs of its inputs."""

    role: str = Field(min_length=1)
    """Registered role (``tts.registry.ROLES``): generator, critic, reviser, fuser, verifier, ranker, voter."""
    model: str = Field(POLICY, min_length=1)
    """``policy`` (the run's model) or a name from the file's ``models:`` section."""
    inputs: tuple[str, ...] = ()
    """Nodes whose outputs this node reads, in the order its prompt shows them (a reviser revises
    its first input's solutions and reads the others as feedback or peer solutions)."""
    n: int = Field(1, ge=1, le=64)
    """Samples per request: solutions (generator, fuser), critiques or revisions per input
    solution (critic, reviser), verdicts per candidate (verifier: 1 reads P(Yes) from the first
    token, more sample reasoned verdicts), rankings (ranker)."""
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    """Sampling temperature; None: the run's (``--temperature``)."""
    max_tokens: int | None = Field(None, ge=1)
    """Most tokens per sample; None: the run's (``--max-tokens``)."""
    prompt: str | None = Field(None, min_length=1)
    """Override of the role's prompt template; the fields it may use depend on the role
    (``{question}`` always; ``{solution}``, ``{context}``, ``{candidates}`` where the role has them)."""
    max_candidates: int = Field(4, ge=1, le=32)
    """Most input solutions one prompt shows (fuser, ranker, a reviser's context): keeps prompts
    within the model's context length."""
    max_parts: int = Field(3, ge=1, le=9)
    """Most sub-problems a decomposer splits a problem into."""
    part: int = Field(0, ge=0, le=9)
    """Which sub-problem a subsolver answers: 1, 2, ... (in the decomposer's order), or 0 for the
    original problem, answered with every earlier step's answer as context."""
    easy_threshold: float = Field(0.5, ge=0.0, le=1.0)
    """A subsolver behind an assessor: a sub-problem whose P(easy) reaches this gets one greedy
    sample; a harder one gets ``n`` samples and a vote."""
    query_marker: str = Field("Question:", min_length=1)
    """Note taker / note reader: the text before the last occurrence of this marker in a question
    is the context it shares with other questions (notes are written about it once)."""


class StageSpec(FrozenConfig):
    """A stage of a multi-stage task: some nodes (usually on one model) and their share of the budget."""

    nodes: tuple[str, ...] = Field(min_length=1)
    """The stage's nodes; with the graph's ``budget`` their ``n`` comes from the stage's share."""
    share: float = Field(gt=0.0, le=1.0)
    """The stage's part of the graph's ``budget``: each of its nodes draws
    ``max(1, round(share * budget / len(nodes)))`` samples per request."""


class GraphSpec(FrozenConfig):
    """A collaboration graph as its file writes it; validation builds and checks the DiGraph."""

    name: str = Field("graph", pattern=r"^[A-Za-z0-9_.-]+$")
    """Short name; the run's results label the graph ``graph:<name>``."""
    description: str = ""
    """What the graph does, for readers of the file."""
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Model name -> backend settings (any field of a backend config: ``model``, ``kind``,
    ``max_model_len``, ...). Settings left out are the run's backend's; ``model`` defaults to the
    name itself, so ``qwen2.5-coder-1.5b: {}`` is that model on the run's backend. A bare string
    is short for ``{model: STRING}``."""
    nodes: dict[str, NodeSpec]
    """Node name -> node."""
    edges: tuple[tuple[str, str], ...] = ()
    """Extra edges as ``[from, to]`` pairs (the same as listing ``from`` in ``to``'s inputs)."""
    output: str | None = None
    """The node whose outputs give the answer; needed only when the graph has several sinks."""
    budget: int | None = Field(None, ge=1)
    """Multi-stage tasks: samples per problem split over ``stages`` by their shares (the sum of
    ``n`` over the staged nodes). Needs ``stages``; see :mod:`tts.graphs.stages` to choose the split."""
    stages: dict[str, StageSpec] = Field(default_factory=dict)
    """Stage name -> its nodes and budget share (AgentTTS-style multi-stage tasks)."""

    @field_validator("models", mode="before")
    @classmethod
    def _bare_model_names(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {k: {"model": v} if isinstance(v, str) else ({} if v is None else v) for k, v in value.items()}

    @model_validator(mode="after")
    def _valid_graph(self) -> GraphSpec:
        build_graph(self)
        return self

    def node_inputs(self, node: str) -> tuple[str, ...]:
        """The node's inputs in prompt order: its ``inputs``, then sources of ``edges`` into it."""
        extra = tuple(src for src, dst in self.edges if dst == node and src not in self.nodes[node].inputs)
        return self.nodes[node].inputs + extra

    def digraph(self) -> nx.DiGraph:
        """The validated graph (built anew: a DiGraph is mutable, the spec is not)."""
        return build_graph(self)

    def stage_samples(self) -> dict[str, int]:
        """Node -> the ``n`` its stage's share of ``budget`` gives it (empty without a budget)."""
        if self.budget is None:
            return {}
        return {node: max(1, round(stage.share * self.budget / len(stage.nodes)))
                for stage in self.stages.values() for node in stage.nodes}

    def resolved(self) -> GraphSpec:
        """The graph as it runs: every staged node's ``n`` set from its stage's share of the budget
        (the budget and shares dropped, the stages kept as labels). Unchanged without a budget."""
        samples = self.stage_samples()
        if not samples:
            return self
        nodes = {name: node.model_copy(update={"n": samples[name]}) if name in samples else node
                 for name, node in self.nodes.items()}
        stages = {name: StageSpec(nodes=st.nodes, share=st.share) for name, st in self.stages.items()}
        return self.model_copy(update={"nodes": nodes, "budget": None, "stages": stages})

    def sink(self) -> str:
        """The node whose outputs give the answer."""
        graph = self.digraph()
        return self.output or next(n for n in graph.nodes if graph.out_degree(n) == 0)


def _check_models(spec: GraphSpec) -> None:
    from tts.config import BUILTIN_BACKEND_CONFIGS, backend_config_class

    if POLICY in spec.models:
        raise GraphError(f"models: {POLICY!r} is the run's own model and cannot be redefined; rename the entry")
    builtin = {f for cls in BUILTIN_BACKEND_CONFIGS.values() for f in cls.model_fields}
    for name, entry in spec.models.items():
        known = builtin
        if "kind" in entry:
            try:
                known = set(backend_config_class(str(entry["kind"])).model_fields)
            except ValueError as exc:
                raise GraphError(f"model {name!r}: {exc}") from None
        unknown = sorted(set(entry) - known)
        if unknown:
            raise GraphError(f"model {name!r}: {', '.join(unknown)} is not a backend setting; use settings of "
                             f"a backend config ({', '.join(sorted(known))})")


def _template_fields(template: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}


def _check_node(spec: GraphSpec, name: str, graph: nx.DiGraph) -> None:
    """Role, model, settings and inputs of one node (errors name it)."""
    from tts.registry import ROLES

    node = spec.nodes[name]
    try:
        role = ROLES.load(node.role)
    except ValueError as exc:
        raise GraphError(f"node {name!r}: {exc}") from None
    if role.uses_model and node.model != POLICY and node.model not in spec.models:
        configured = ", ".join([POLICY, *spec.models])
        raise GraphError(f"node {name!r}: model {node.model!r} is not configured; use one of: {configured} "
                         "(or add it to the models: section)")
    # Settings that differ from their default, so that a full dump of the spec loads again.
    changed = {k for k, f in NodeSpec.model_fields.items() if getattr(node, k) != f.default}
    ignored = sorted((changed - {"role", "inputs"}) - role.settings)
    if ignored:
        takes = ", ".join(sorted(role.settings)) or "no settings"
        raise GraphError(f"node {name!r}: a {node.role} does not use {', '.join(ignored)}; remove "
                         f"{'it' if len(ignored) == 1 else 'them'} (a {node.role} takes {takes})")
    problem = role.check_settings(node)
    if problem:
        raise GraphError(f"node {name!r}: {problem}")
    if node.prompt is not None:
        try:
            fields = _template_fields(node.prompt)
        except ValueError as exc:
            raise GraphError(f"node {name!r}: prompt is not a valid template ({exc}); write fields as "
                             "{question} and double literal braces ({{ }})") from None
        unknown = sorted(fields - set(role.prompt_fields))
        required = role.prompt_fields[0]
        if unknown or required not in fields:
            others = [f"{{{f}}}" for f in role.prompt_fields if f != required]
            allowed = f"and may use {', '.join(others)}" if others else "and no other field"
            got = ", ".join(f"{{{f}}}" for f in sorted(fields)) or "no fields"
            raise GraphError(f"node {name!r}: a {node.role} prompt must use {{{required}}} {allowed}; got {got}")
    produced = [ROLES.load(spec.nodes[src].role).produces for src in spec.node_inputs(name)]
    problem = role.check_inputs(produced)
    if problem:
        raise GraphError(f"node {name!r}: {problem}")


def _check_stages(spec: GraphSpec) -> None:
    """Stages name existing nodes, each node in one stage; a budget needs stages whose shares sum
    to 1 and whose nodes draw samples (their ``n`` then comes from the share, not the file)."""
    from tts.registry import ROLES

    if spec.budget is not None and not spec.stages:
        raise GraphError("budget: a budget is split over stages; add a stages: section (or remove budget)")
    owner: dict[str, str] = {}
    for stage, st in spec.stages.items():
        for node in st.nodes:
            if node not in spec.nodes:
                raise GraphError(f"stage {stage!r}: {node!r} is not a node of the graph (nodes: {', '.join(spec.nodes)})")
            if node in owner:
                raise GraphError(f"stage {stage!r}: node {node!r} is already in stage {owner[node]!r}; a node "
                                 "belongs to one stage")
            owner[node] = stage
            if spec.budget is None:
                continue
            if "n" not in ROLES.load(spec.nodes[node].role).settings:
                raise GraphError(f"stage {stage!r}: node {node!r} is a {spec.nodes[node].role}, which draws no "
                                 "samples, so a budget share cannot scale it; leave it out of the stage")
            if spec.nodes[node].n != 1:
                raise GraphError(f"node {node!r}: its n comes from stage {stage!r}'s share of the budget; remove n")
    if spec.budget is not None:
        total = sum(st.share for st in spec.stages.values())
        if abs(total - 1.0) > 1e-6:
            raise GraphError(f"stages: the shares sum to {total:g}; with a budget they must sum to 1")


def build_graph(spec: GraphSpec) -> nx.DiGraph:
    """The DiGraph of a spec, every node carrying its NodeSpec (``graph.nodes[name]["spec"]``).

    Raises:
        GraphError: The first problem found, naming the node (or model) and what to change.
    """
    if not spec.nodes:
        raise GraphError("the graph has no nodes; add a nodes: section")
    _check_models(spec)
    graph = nx.DiGraph()
    for name, node in spec.nodes.items():
        graph.add_node(name, spec=node)
    for name, node in spec.nodes.items():
        for src in node.inputs:
            if src not in spec.nodes:
                raise GraphError(f"node {name!r}: input {src!r} is not a node of the graph; define it or "
                                 f"remove it (nodes: {', '.join(spec.nodes)})")
            if src == name:
                raise GraphError(f"node {name!r} lists itself as an input; a graph may not have cycles")
            graph.add_edge(src, name)
    for src, dst in spec.edges:
        for end in (src, dst):
            if end not in spec.nodes:
                raise GraphError(f"edge {src} -> {dst}: {end!r} is not a node of the graph; define it or "
                                 f"remove the edge (nodes: {', '.join(spec.nodes)})")
        graph.add_edge(src, dst)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise GraphError(f"node {cycle[0][0]!r} is on a cycle ({path}); outputs flow one way: remove an edge")
    for name in nx.topological_sort(graph):
        _check_node(spec, name, graph)
    sinks = [n for n in graph.nodes if graph.out_degree(n) == 0]
    if spec.output is not None:
        if spec.output not in spec.nodes:
            raise GraphError(f"output {spec.output!r} is not a node of the graph (nodes: {', '.join(spec.nodes)})")
        out = spec.output
    elif len(sinks) != 1:
        raise GraphError(f"the graph has {len(sinks)} sinks ({', '.join(sinks)}); say which node gives the "
                         "answer with output: NODE")
    else:
        out = sinks[0]
    _check_stages(spec)
    from tts.registry import ROLES

    if ROLES.load(spec.nodes[out].role).produces != "solution":
        raise GraphError(f"node {out!r} gives the answer but a {spec.nodes[out].role} writes no solutions; "
                         "make a node that does (generator, reviser, fuser, verifier, ranker, voter) the output")
    return graph


def levels(graph: nx.DiGraph) -> list[list[str]]:
    """Topological levels: every node's inputs lie in earlier levels (node order kept within one)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    return [sorted(level, key=order.__getitem__) for level in nx.topological_generations(graph)]


def parse_graph(data: Any, source: str = "graph") -> GraphSpec:
    """A validated GraphSpec from a mapping (a parsed YAML file).

    Raises:
        GraphError: One line naming ``source`` and the node, model or field at fault.
    """
    if not isinstance(data, dict):
        raise GraphError(f"{source}: a graph file is a mapping with a nodes: section, got {type(data).__name__}")
    try:
        return GraphSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, GraphError):
            raise GraphError(f"{source}: {cause}") from None
        where = ".".join(str(x) for x in first["loc"]) or "graph"
        raise GraphError(f"{source}: {where}: {first['msg']}") from None


def load_graph_file(path: Path | str) -> GraphSpec:
    """Read and validate a graph YAML file; its ``name`` defaults to the file's stem.

    Raises:
        GraphError: A missing or unreadable file, or an invalid graph (one line, naming the node).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise GraphError(f"graph file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise GraphError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if isinstance(data, dict) and "name" not in data:
        data = {"name": path.stem, **data}
    return parse_graph(data, str(path))
