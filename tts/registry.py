"""Name -> implementation registries, resolved lazily so that listing names imports nothing heavy.

Each registry maps a short name to ``"module:attribute"``. Third-party packages add entries through
the entry-point group ``tts.<kind>``, one group per registry: ``tts.strategy``, ``tts.verifier``,
``tts.backend``, ``tts.benchmark`` and ``tts.role`` (for example, in a plugin's pyproject.toml,
``[project.entry-points."tts.strategy"] my_vote = "my_pkg.vote:MyVote"``), so a plugin needs no
change here. A name is taken once: registering it again, or a plugin named like a built-in, is an
error that says which to rename, never a silent overwrite.

A registry is shared by every thread of a process (the server solves requests on a thread pool): a
lock guards its entries, and the plugins count as loaded only once their entries are in, so a
thread never sees a registry that has "loaded" its plugins but does not yet hold them.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid names."""


class RegistryError(ValueError):
    """A registration that cannot stand: a name taken twice, or an entry of the wrong kind."""


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """A named set of lazily imported implementations of one kind.

    Args:
        kind: What the entries are ("strategy", "backend", "benchmark"); used in messages and as
            the plugin entry-point group ``tts.<kind>``.
        entries: name -> "module:attribute" (or the object itself).
        base: ``"module:Class"`` every entry must subclass (checked when an entry is registered as
            an object, and when a lazy entry is first loaded), or None.
        requires: Attributes every entry must have (for kinds defined by a protocol, such as
            verifiers and backends).
    """

    def __init__(self, kind: str, entries: dict[str, Any], *, base: str | None = None,
                 requires: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.base = base
        self.requires = requires
        self._entries: dict[str, Any] = dict(entries)
        self._plugins_loaded = False
        self._lock = threading.RLock()  # guards _entries and _plugins_loaded

    @property
    def group(self) -> str:
        """The entry-point group third-party packages register into."""
        return f"tts.{self.kind}"

    def _load_plugins(self) -> None:
        """Add the plugins' entries once; every caller returns only after they are in."""
        if self._plugins_loaded:  # set last, under the lock: when it reads True, the entries are in
            return
        with self._lock:
            if self._plugins_loaded:
                return
            found: dict[str, str] = {}
            for ep in entry_points(group=self.group):
                taken = found.get(ep.name, self._entries.get(ep.name))  # a built-in, or another plugin
                if taken is not None and taken != ep.value:
                    source = f" (package {ep.dist.name})" if getattr(ep, "dist", None) else ""
                    raise RegistryError(
                        f"The plugin {self.kind} {ep.name!r} = {ep.value!r}{source} is named like the "
                        f"{self.kind} already registered as {taken if isinstance(taken, str) else repr(taken)}. "
                        f"Rename the plugin's entry point in group {self.group!r}.")
                found[ep.name] = ep.value
            self._entries.update(found)
            self._plugins_loaded = True

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_plugins()
        with self._lock:
            return sorted(self._entries)

    def check(self, name: str) -> str:
        """Return ``name`` if registered, else raise with the valid names and a close match."""
        self._load_plugins()
        with self._lock:
            if name in self._entries:
                return name
            close = difflib.get_close_matches(name, list(self._entries), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(
            f"Unknown {self.kind} {name!r}.{hint} Choose one of: {', '.join(self.names())}."
        )

    def register(self, name: str, target: str | T, *, replace: bool = False) -> None:
        """Add an entry: ``"module:attribute"`` (imported on first use) or the object itself.

        Packages should prefer the ``tts.<kind>`` entry-point group; this is for code that
        defines an implementation at run time (notebooks, tests).

        Raises:
            RegistryError: ``name`` is taken (pass ``replace=True`` to replace it on purpose), or
                the object is not of this registry's kind.
        """
        self._load_plugins()
        if not isinstance(target, str):
            self._check_kind(name, target)
        with self._lock:
            if name in self._entries and not replace:
                raise RegistryError(
                    f"The {self.kind} name {name!r} is taken (by {self._entries[name]!r}): choose another "
                    f"name, or pass replace=True to replace it.")
            self._entries[name] = target

    def unregister(self, name: str) -> None:
        """Remove an entry added with :meth:`register` (no error if absent)."""
        with self._lock:
            self._entries.pop(name, None)

    def load(self, name: str) -> T:
        """Import and return the implementation registered as ``name``."""
        with self._lock:
            target = self._entries[self.check(name)]
        if not isinstance(target, str):
            return target
        obj = _import(target)  # outside the lock: an import may itself read a registry
        self._check_kind(name, obj)
        with self._lock:
            if self._entries.get(name) == target:  # not replaced meanwhile
                self._entries[name] = obj  # checked once; later loads skip the import machinery
        return obj

    def _check_kind(self, name: str, obj: Any) -> None:
        if self.base is not None:
            base = _import(self.base)
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise RegistryError(f"The {self.kind} {name!r} is {obj!r}, which is not a subclass of "
                                    f"{self.base.replace(':', '.')}; a {self.kind} must be one.")
        missing = [a for a in self.requires if not hasattr(obj, a)]
        if missing:
            raise RegistryError(f"The {self.kind} {name!r} ({obj!r}) lacks {', '.join(missing)}, which "
                                f"every {self.kind} has.")


STRATEGIES: Registry[type] = Registry(
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
        "exec_vote": "tts.search.sampling.execution_vote:ExecutionVote",
        "public_tests": "tts.search.sampling.execution_vote:PublicTestsVote",
        "codet": "tts.search.sampling.codet:CodeT",
        "tool_vote": "tts.search.sampling.tool_vote:ToolVote",
        "usc": "tts.search.sampling.usc:UniversalSelfConsistency",
        "program_vote": "tts.search.sampling.program_vote:ProgramVote",
        "tir": "tts.search.sequential.tool_integrated:ToolIntegratedReasoning",
        "weighted_vote": "tts.search.sampling.weighted_vote:WeightedVote",
    },
    base="tts.search.base:Strategy",
)

VERIFIERS: Registry[type] = Registry(
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
    requires=("config_class", "from_config", "score"),
)

ROLES: Registry[type] = Registry(
    "role",
    {
        "assessor": "tts.graphs.subproblems:Assessor",
        "aggregator": "tts.graphs.roles:Aggregator",
        "critic": "tts.graphs.roles:Critic",
        "decomposer": "tts.graphs.subproblems:Decomposer",
        "fuser": "tts.graphs.roles:Fuser",
        "generator": "tts.graphs.roles:GeneratorRole",
        "note_reader": "tts.graphs.notes:NoteReader",
        "note_taker": "tts.graphs.notes:NoteTaker",
        "ranker": "tts.graphs.roles:Ranker",
        "reviser": "tts.graphs.roles:Reviser",
        "selector": "tts.graphs.roles:Selector",
        "subsolver": "tts.graphs.subproblems:SubSolver",
        "verifier": "tts.graphs.roles:VerifierRole",
        "voter": "tts.graphs.roles:Voter",
    },
    base="tts.graphs.roles:Role",
)

BACKENDS: Registry[type] = Registry(
    "backend",
    {
        "vllm": "tts.backends.vllm:VLLMGenerator",
        "openai": "tts.backends.openai:OpenAIGenerator",
        "litellm": "tts.backends.litellm:LiteLLMGenerator",
        "scripted": "tts.backends.scripted:ScriptedGenerator",
    },
    requires=("from_config", "generate"),
)

BENCHMARKS: Registry[type] = Registry(
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
        "humaneval": "tts.benchmarks.humaneval:HumanEvalBenchmark",
        "jsonl": "tts.benchmarks.datasets:FileBenchmark",
        # BFCL (needs bfcl-eval's own environment, `make bfcl-env`): one entry per category.
        **{f"bfcl:{c}": f"tts.benchmarks.bfcl:{c}" for c in (
            "simple", "simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
            "parallel_multiple", "irrelevance", "live_simple", "live_multiple", "live_parallel",
            "live_parallel_multiple", "live_irrelevance")},
    },
    base="tts.benchmarks.datasets:Benchmark",
)
