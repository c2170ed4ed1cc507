"""Name -> implementation registries, resolved lazily so that listing names imports nothing heavy.

Each registry maps a short name to ``"module:attribute"``. Third-party packages add entries through
the entry-point group ``tts.<registry>`` (e.g. ``tts.strategies``), so a plugin needs no change here.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import Any


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid names."""


class Registry:
    """A named set of lazily imported implementations.

    Args:
        kind: What the entries are ("strategy", "backend", "benchmark"), used in messages.
        entries: name -> "module:attribute" (or the object itself).
    """

    def __init__(self, kind: str, entries: dict[str, Any]) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = dict(entries)
        self._plugins_loaded = False

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=f"tts.{self.kind}"):
            self._entries.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_plugins()
        return sorted(self._entries)

    def check(self, name: str) -> str:
        """Return ``name`` if registered, else raise with the valid names and a close match."""
        self._load_plugins()
        if name in self._entries:
            return name
        close = difflib.get_close_matches(name, self._entries, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(
            f"Unknown {self.kind} {name!r}.{hint} Choose one of: {', '.join(self.names())}."
        )

    def register(self, name: str, target: str | Any) -> None:
        """Add an entry: ``"module:attribute"`` (imported on first use) or the object itself.

        Packages should prefer the ``tts.<kind>`` entry-point group; this is for code that
        defines an implementation at run time (notebooks, tests).
        """
        self._entries[name] = target

    def unregister(self, name: str) -> None:
        """Remove an entry added with :meth:`register` (no error if absent)."""
        self._entries.pop(name, None)

    def load(self, name: str) -> Any:
        """Import and return the implementation registered as ``name``."""
        target = self._entries[self.check(name)]
        if not isinstance(target, str):
            return target
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)


STRATEGIES = Registry(
    "strategy",
    {
        "ab_mcts": "tts.search.tree.ab_mcts:ABMCTS",
        "auto": "tts.budgets.auto_strategy:AutoStrategy",
        "beam": "tts.search.tree.beam:BeamSearch",
        "best_of_n": "tts.search.sampling.best_of_n:BestOfN",
        "budget_forcing": "tts.search.sequential.budget_forcing:BudgetForcing",
        "certainty_probe": "tts.search.sampling.certainty_probe:CertaintyProbe",
        "deepconf": "tts.search.sampling.deepconf:DeepConf",
        "dvts": "tts.search.tree.dvts:DVTS",
        "ets": "tts.search.tree.ets:ETS",
        "aggregate": "tts.graphs.selection:Aggregate",
        "genselect": "tts.graphs.selection:GenSelect",
        "graph": "tts.graphs.strategy:GraphStrategy",
        "generative_verification": "tts.search.sequential.generative_verification:GenerativeVerification",
        "lookahead": "tts.search.tree.lookahead:Lookahead",
        "mcts": "tts.search.tree.mcts:MCTS",
        "particle_filtering": "tts.search.tree.particle_filtering:ParticleFiltering",
        "particle_gibbs": "tts.search.tree.particle_filtering:ParticleGibbs",
        "rebase": "tts.search.tree.rebase:Rebase",
        "revision": "tts.search.sequential.revision:Revision",
        "self_consistency": "tts.search.sampling.self_consistency:SelfConsistency",
        "tool_vote": "tts.search.sampling.tool_vote:ToolVote",
        "usc": "tts.search.sampling.usc:UniversalSelfConsistency",
        "weighted_vote": "tts.search.sampling.weighted_vote:WeightedVote",
    },
)

VERIFIERS = Registry(
    "verifier",
    {
        "arithmetic": "tts.verifiers.arithmetic:ArithmeticVerifier",
        "chain": "tts.verifiers.chain_check:ChainCheckVerifier",
        "logprob": "tts.verifiers.confidence:LogprobVerifier",
        "self_certainty": "tts.verifiers.self_certainty:SelfCertaintyVerifier",
        "judge": "tts.verifiers.judge:LLMJudge",
        "prm": "tts.verifiers.prm:PRMVerifier",
        "rm": "tts.verifiers.rm:RMVerifier",
    },
)

ROLES = Registry(
    "role",
    {
        "assessor": "tts.graphs.subproblems:Assessor",
        "aggregator": "tts.graphs.roles:Aggregator",
        "critic": "tts.graphs.roles:Critic",
        "decomposer": "tts.graphs.subproblems:Decomposer",
        "fuser": "tts.graphs.roles:Fuser",
        "generator": "tts.graphs.roles:Generator",
        "note_reader": "tts.graphs.notes:NoteReader",
        "note_taker": "tts.graphs.notes:NoteTaker",
        "ranker": "tts.graphs.roles:Ranker",
        "reviser": "tts.graphs.roles:Reviser",
        "selector": "tts.graphs.roles:Selector",
        "subsolver": "tts.graphs.subproblems:SubSolver",
        "verifier": "tts.graphs.roles:Verifier",
        "voter": "tts.graphs.roles:Voter",
    },
)

BACKENDS = Registry(
    "backend",
    {
        "vllm": "tts.backends.vllm:VLLMGenerator",
        "openai": "tts.backends.openai:OpenAIGenerator",
        "scripted": "tts.backends.scripted:ScriptedGenerator",
    },
)

BENCHMARKS = Registry(
    "benchmark",
    {
        "demo": "tts.benchmarks.demo:DemoBenchmark",
        "math500": "tts.benchmarks.datasets:MATH500",
        "aime2024": "tts.benchmarks.datasets:AIME2024",
        "aime2025": "tts.benchmarks.datasets:AIME2025",
        "amc2023": "tts.benchmarks.datasets:AMC2023",
        "gsm8k": "tts.benchmarks.datasets:GSM8K",
        "stories": "tts.benchmarks.stories:StoriesBenchmark",
        "chains": "tts.benchmarks.chains:ChainsBenchmark",
        "jsonl": "tts.benchmarks.datasets:FileBenchmark",
        # BFCL (needs bfcl-eval's own environment, `make bfcl-env`): one entry per category.
        **{f"bfcl:{c}": f"tts.benchmarks.bfcl:{c}" for c in (
            "simple", "simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
            "parallel_multiple", "irrelevance", "live_simple", "live_multiple", "live_parallel",
            "live_parallel_multiple", "live_irrelevance")},
    },
)
