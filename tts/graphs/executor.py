"""Run a collaboration graph on a batch of problems, level by level.

1. The graph's topological levels (``networkx.topological_generations``): a node's inputs all lie
   in earlier levels, so the nodes of one level can run together.
2. Per level, every node plans its requests for every problem from its inputs' outputs; the
   requests are grouped by the node's model and each model gets ONE ``generate`` call for the
   whole level (all its nodes, all problems), so the engine batches them and shares prefixes.
3. Each node reads its results into candidates; its requests' usage goes to the problem's
   usage, each request labelled with the node's model when that is not the policy (the ledger
   prices it on that model's architecture).
4. The output node's candidates give the answer: the best-scored one when they are scored
   (verifier, ranker, voter), else a majority vote over their answers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tts.answers import extract_answer
from tts.backends.base import GenerationRequest, Generator, Message
from tts.config import SamplingConfig
from tts.graphs.graph import GraphSpec, levels
from tts.graphs.roles import Candidate, NodeContext, Role, RoleOutput
from tts.registry import ROLES
from tts.search.base import vote
from tts.types import Problem, Sample, Solution, Trace, Usage

logger = logging.getLogger(__name__)

STRATEGY = "graph"


@dataclass
class _NodeRun:
    """One node's work on one problem."""

    output: RoleOutput = RoleOutput(())
    usage: Usage = field(default_factory=Usage)
    requests: int = 0


def label_usage(usage: Usage, model: str) -> Usage:
    """``usage`` with every request labelled as served by ``model`` ("" leaves it the policy's)."""
    if not model:
        return usage
    return dataclasses.replace(usage, shapes=tuple(dataclasses.replace(s, model=model) for s in usage.shapes))


class GraphExecutor:
    """Runs one graph spec with the generators of its models.

    Args:
        spec: The validated graph (a multi-stage one runs as :meth:`GraphSpec.resolved`).
        prompt: Problem -> chat messages (the benchmark's template).
        sampling: The run's sampling settings (nodes override temperature and max tokens).
        extract: Text -> answer.
        seed: The run seed (each request's seed is derived from it, the problem and the node).
    """

    def __init__(self, spec: GraphSpec, prompt: Callable[[Problem], tuple[Message, ...]],
                 sampling: SamplingConfig | None = None, extract: Callable[[str], str | None] = extract_answer,
                 seed: int = 0) -> None:
        spec = spec.resolved()  # a multi-stage graph runs with its stages' budget shares as n
        self.spec = spec
        self.graph = spec.digraph()
        self.levels = levels(self.graph)
        self.output = spec.sink()
        sampling = sampling or SamplingConfig()
        self.roles: dict[str, Role] = {}
        self.contexts: dict[str, NodeContext] = {}
        for name, node in spec.nodes.items():
            role: Role = ROLES.load(node.role)()
            self.roles[name] = role
            temperature = node.temperature if node.temperature is not None else (
                role.default_temperature if role.default_temperature is not None else sampling.temperature)
            max_tokens = node.max_tokens or role.default_max_tokens or sampling.max_tokens
            self.contexts[name] = NodeContext(name, node, prompt, extract, temperature, sampling.top_p, max_tokens, seed)

    def models(self) -> list[str]:
        """Model names the graph's nodes use (``policy`` for the run's model)."""
        return sorted({n.model for name, n in self.spec.nodes.items() if self.roles[name].uses_model})

    def run(self, problems: Sequence[Problem], generators: Mapping[str, Generator],
            labels: Mapping[str, str] | None = None) -> list[Solution]:
        """Solve every problem; one Solution per problem, in order.

        Args:
            problems: The batch.
            generators: Model name (``policy`` and the file's ``models:`` names) -> generator.
            labels: Model name -> the model name its requests are priced on ("" or absent:
                the policy's).
        """
        missing = [m for m in self.models() if m not in generators]
        if missing:
            raise ValueError(f"no generator for model(s) {', '.join(missing)} of graph {self.spec.name!r}")
        labels = labels or {}
        runs: list[dict[str, _NodeRun]] = [{} for _ in problems]
        for level in self.levels:
            # 1. plan: every node of the level, every problem
            planned: dict[str, list[tuple[str, int, GenerationRequest]]] = {}
            for node in level:
                for i, problem in enumerate(problems):
                    inputs = self._inputs(node, runs[i])
                    requests = self.roles[node].plan(self.contexts[node], problem, inputs)
                    runs[i][node] = _NodeRun(requests=len(requests))
                    for req in requests:
                        planned.setdefault(self.spec.nodes[node].model, []).append((node, i, req))
            # 2. one generate call per model for the whole level
            results: dict[tuple[str, int], list[Any]] = {}
            try:
                for model, items in planned.items():
                    got = generators[model].generate([req for _, _, req in items])
                    if len(got) != len(items):
                        raise RuntimeError(f"model {model!r} returned {len(got)} results for {len(items)} requests")
                    for (node, i, _), result in zip(items, got, strict=True):
                        results.setdefault((node, i), []).append(result)
            except BaseException:
                for node in level:  # nothing planned for this level will be read
                    self.roles[node].abandon()
                raise
            # 3. read: outputs and usage per node and problem
            for node in level:
                model = self.spec.nodes[node].model
                for i, problem in enumerate(problems):
                    mine = results.get((node, i), [])
                    output = self.roles[node].read(self.contexts[node], problem, self._inputs(node, runs[i]), mine)
                    usage = label_usage(Usage.total([r.usage for r in mine]), labels.get(model, ""))
                    runs[i][node] = _NodeRun(output, usage, len(mine))
        return [self._solution(problem, run) for problem, run in zip(problems, runs, strict=True)]

    def _inputs(self, node: str, run: Mapping[str, _NodeRun]) -> list[tuple[Candidate, ...]]:
        return [run[src].output.candidates for src in self.spec.node_inputs(node)]

    def _solution(self, problem: Problem, run: Mapping[str, _NodeRun]) -> Solution:
        """4. the answer from the output node, and the trace of every node."""
        final = run[self.output].output
        answer, confidence, chosen, votes = select(final.candidates)
        votes = final.votes or votes
        samples: list[Sample] = []
        index: dict[str, int] = {}
        for level in self.levels:
            for node in level:
                if not self.roles[node].writes:
                    continue
                for c in run[node].output.candidates:
                    index[c.id] = len(samples)
                    samples.append(Sample(c.text, c.answer, c.completion_tokens, None, c.finish_reason))
        selected = index.get(chosen.origin().id) if chosen is not None else None
        events: dict[str, int] = {}
        for node_run in run.values():
            for kind, count in node_run.output.events.items():
                events[kind] = events.get(kind, 0) + count
        trace = Trace(STRATEGY, tuple(samples), votes=votes, selected=selected,
                      tree=self._tree(run, chosen), events=events)
        usage = Usage.total([run[n].usage for lv in self.levels for n in lv])
        return Solution(problem.id, answer, confidence, usage, trace)

    def _tree(self, run: Mapping[str, _NodeRun], chosen: Candidate | None) -> tuple[dict[str, Any], ...]:
        """Every node (role, model, inputs, usage) with its outputs as children, for ``tts show``."""
        chosen_ids = set()
        c = chosen
        while c is not None:
            chosen_ids.add(c.id)
            c = c.about
        out: list[dict[str, Any]] = []
        for depth, level in enumerate(self.levels):
            for node in level:
                spec, node_run = self.spec.nodes[node], run[node]
                model = spec.model if self.roles[node].uses_model else "-"
                out.append({"id": node, "parent": None, "depth": depth, "node": node, "role": spec.role, "model": model,
                            "inputs": list(self.spec.node_inputs(node)), "requests": node_run.requests,
                            "completion_tokens": node_run.usage.completion_tokens,
                            "prompt_tokens": node_run.usage.prompt_tokens,
                            "text": f"{node} ({spec.role} on {model})", "score": None, "kept": True})
                for c in node_run.output.candidates:
                    out.append({"id": c.id, "parent": node, "depth": depth, "node": node, "kind": c.kind, "text": c.text,
                                "answer": c.answer, "score": c.score, "about": c.about.id if c.about else None,
                                "completion_tokens": c.completion_tokens, "kept": c.id in chosen_ids})
        return tuple(out)


def select(candidates: Sequence[Candidate]) -> tuple[str | None, float, Candidate | None, dict[str, float]]:
    """(answer, confidence, chosen candidate, votes) from the output node's candidates.

    Scored candidates (verifier, ranker, voter): the best score wins (the first on ties) and is
    the confidence. Unscored ones: a majority vote over their answers, the share as confidence.
    """
    if not candidates:
        return None, 0.0, None, {}
    if all(c.score is not None for c in candidates):
        best = max(range(len(candidates)), key=lambda i: (candidates[i].score, -i))
        c = candidates[best]
        return c.answer, float(c.score or 0.0), c, {}
    answer, share, votes, idx = vote([Sample(c.text, c.answer) for c in candidates])
    return answer, share, (candidates[idx] if idx is not None else None), votes
