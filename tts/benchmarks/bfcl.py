"""The Berkeley Function Calling Leaderboard (BFCL v4) as ``tts eval --benchmark bfcl:<category>``.

The single-turn categories, each asked as a native function-calling ("FC") model is asked: the
conversation as BFCL has it, the functions offered as OpenAI tools, the model's tool calls graded
by BFCL's own AST checker (:mod:`tts.benchmarks.bfcl_grading`). Categories: ``simple`` (BFCL's
``simple_python``; ``bfcl:simple_python`` is the same), ``simple_java``, ``simple_javascript``,
``multiple``, ``parallel``, ``parallel_multiple``, ``irrelevance`` and the ``live_`` variants
(``live_simple``, ``live_multiple``, ``live_parallel``, ``live_parallel_multiple``,
``live_irrelevance``).

**Where the data come from.** The ``bfcl-eval`` package ships them as JSON-lines files
(``bfcl_eval/data/BFCL_v4_<category>.json``, the possible answers in ``data/possible_answer/``).
bfcl-eval cannot share tts's environment (it pins numpy==1.26.4 and more), so it lives in one of its
own, ``.venv-bfcl`` (``make bfcl-env``), and tts reads its files from that environment's
site-packages, found by asking that environment's Python (``$TTS_BFCL_PYTHON``, else
``.venv-bfcl/bin/python`` beside tts's source tree or in the current directory). bfcl_eval is never
imported into tts's process.

**What the model sees** mirrors bfcl-eval 2026.3.23 for FC models (``OpenAICompletionsHandler``):

- the messages of the entry's first (only) turn, as they are: FC handlers add no system prompt
  (``BaseHandler.inference_single_turn_FC`` -> ``_pre_query_processing_FC`` starts an empty message
  list, ``add_first_turn_message_FC`` extends it by ``question[0]``); live entries carry their own
  system message;
- the functions with BFCL's language hint (``bfcl_eval.utils._func_doc_language_specific_pre_processing``,
  applied by ``load_dataset_entry`` when it prepares generation: " Note that the provided function
  is in Python 3 syntax." on each description; Java and JavaScript parameters become strings whose
  description names the type), converted by ``bfcl_eval.model_handler.utils.convert_to_tool(functions,
  GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)``: dots in names become underscores, the
  parameters' ``"type": "dict"`` becomes ``"object"``, every type goes through ``GORILLA_TO_OPENAPI``
  (``float`` -> ``number`` with ``"format": "float"`` and " This is a float type value." added to its
  description, ``tuple`` -> ``array``, unknown types -> ``string``), nested properties and items
  converted as ``_cast_to_openai_type`` does; each function wrapped as ``{"type": "function",
  "function": ...}``. :func:`openai_tools` is that conversion; a test compares it with bfcl-eval's
  own on every entry of every category.

**The problem's answer** (``Problem.answer``) is one correct call set in tts's canonical form
(:func:`tts.backends.tool_calls.calls_answer`: the offered names, each argument's first possible
value, arguments BFCL marks optional-by-omission left out), so that the scripted backend plays a
model that calls tools (tests, CI). For irrelevance problems it is :data:`NO_CALL_ANSWER`, which is
not a call list. The real gold, BFCL's possible-answer record, and the functions as the checker
reads them stay in the metadata (``bfcl_ground_truth``, ``bfcl_functions``) for the grader.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from tts.backends.chat import ToolCall
from tts.backends.tool_calls import calls_answer
# bfcl_python stays importable from here, where it was first.
from tts.benchmarks.bfcl_setup import BFCLSetupError, bfcl_python, data_dir, is_irrelevance  # noqa: F401
from tts.benchmarks.datasets import Benchmark, DatasetError, read_jsonl
from tts.prompts import PLAIN_PROMPT
from tts.types import Problem

VERSION_PREFIX = "BFCL_v4"
"""The file-name prefix of the data in the bfcl-eval version tts is tested with (2026.3.23)."""

CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
    "irrelevance", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
    "live_irrelevance",
)
"""BFCL's single-turn categories that ``bfcl:<category>`` serves (BFCL's own names)."""
ALIASES = {"simple": "simple_python"}
"""Short names: BFCL v3 called ``simple_python`` ``simple``."""

NO_CALL_ANSWER = "(no tool call)"
"""The answer of an irrelevance problem: the right reply calls no tool (not a call list)."""

# bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI (bfcl-eval 2026.3.23), copied: tts does not
# import bfcl_eval; a test compares the conversion with bfcl-eval's own.
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}


def canonical_category(name: str) -> str:
    """BFCL's name of a category given as ``simple``, ``simple_python``, ``live_simple``, ..."""
    category = ALIASES.get(name, name)
    if category not in CATEGORIES:
        raise DatasetError(f"bfcl has no category {name!r}; choose one of: "
                           f"{', '.join(sorted([*CATEGORIES, *ALIASES]))} (as --benchmark bfcl:<category>).")
    return category


def language(category: str) -> str:
    """The language of a category's functions as bfcl-eval names it (``utils.is_java`` / ``is_js``)."""
    if "javascript" in category:
        return "javascript"
    return "java" if "java" in category else "python"


# 1. What the model is shown: bfcl-eval's FC preparation of the functions, mirrored.

def _language_hint(category: str) -> str:
    # bfcl_eval.utils._get_language_specific_hint
    lang = language(category)
    if lang == "java":
        return " Note that the provided function is in Java 8 SDK syntax."
    if lang == "javascript":
        return " Note that the provided function is in JavaScript syntax."
    return " Note that the provided function is in Python 3 syntax."


def with_language_hint(functions: Sequence[Mapping[str, Any]], category: str) -> list[dict[str, Any]]:
    """The functions as BFCL prepares them for generation (``utils._func_doc_language_specific_pre_processing``):
    the language hint on each description; Java and JavaScript parameters turned into strings whose
    description names the type (array items and dict properties moved into the description)."""
    functions = copy.deepcopy(list(functions))
    lang = language(category)
    for item in functions:
        item["description"] = item["description"] + _language_hint(category)
        properties = item["parameters"]["properties"]
        if lang == "python":
            continue
        name = "Java" if lang == "java" else "JavaScript"
        for value in properties.values():
            if value["type"] == "any":
                value["description"] += f" This parameter can be of any type of {name} object in string representation."
            else:
                value["description"] += f" This is {name} {value['type']} type parameter in string representation."
            if value["type"] in (("ArrayList", "Array") if lang == "java" else ("array",)):
                value["description"] += (f" The list elements are of type {value['items']['type']}; they are not in "
                                         "string representation.")
                del value["items"]
            if lang == "javascript" and value["type"] == "dict" and "properties" in value:
                value["description"] += (" The dictionary entries have the following schema; they are not in string "
                                         f"representation. {json.dumps(value['properties'])}")
                del value["properties"]
            value["type"] = "string"
    return functions


def _cast_to_openai_type(properties: dict[str, Any]) -> dict[str, Any]:
    """``bfcl_eval.model_handler.utils._cast_to_openai_type`` with ``GORILLA_TO_OPENAPI``, in place."""
    mapping = GORILLA_TO_OPENAPI
    for prop in properties.values():
        if "type" not in prop:
            prop["type"] = "string"
        else:
            var_type = prop["type"]
            if var_type == "float":
                prop["format"] = "float"
                prop["description"] += " This is a float type value."
            prop["type"] = mapping.get(var_type, "string")
        if prop["type"] in ("array", "object"):
            if "properties" in prop:
                prop["properties"] = _cast_to_openai_type(prop["properties"])
            elif "items" in prop:
                items = prop["items"]
                items["type"] = mapping[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = mapping[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_to_openai_type(items["properties"])
    return properties


def tool_name(name: str) -> str:
    """A function's name as offered to the model: OpenAI-style names have no dots, so BFCL writes
    them as underscores (``math.factorial`` -> ``math_factorial``)."""
    return re.sub(r"\.", "_", name)


def openai_tools(functions: Sequence[Mapping[str, Any]], category: str) -> list[dict[str, Any]]:
    """BFCL functions as the OpenAI tools bfcl-eval sends an FC model: the language hint
    (:func:`with_language_hint`), then ``convert_to_tool(functions, GORILLA_TO_OPENAPI,
    ModelStyle.OPENAI_COMPLETIONS)`` (module docstring)."""
    tools = []
    for item in with_language_hint(functions, category):
        item["name"] = tool_name(item["name"])
        item["parameters"]["type"] = "object"
        item["parameters"]["properties"] = _cast_to_openai_type(item["parameters"]["properties"])
        tools.append({"type": "function", "function": item})
    return tools


# 3. The problems.

def _first(value: Any) -> Any:
    """The first possible value of a possible-answer entry, nested dicts taken the same way."""
    if isinstance(value, dict):
        return {k: _first(v[0]) if isinstance(v, list) else v for k, v in value.items()
                if not (isinstance(v, list) and v and v[0] == "")}
    if isinstance(value, list):
        return [_first(v) for v in value]
    return value


def _as_source(value: Any, lang: str, kind: str | None) -> Any:
    """A Java or JavaScript argument as the model writes it, a string of source (BFCL converts it
    back with its type converters); Python values stay as they are. Scalars and JSON-like
    collections only: a reference for the scripted backend, not a claim about every Java form."""
    if lang == "python" or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}L" if kind == "long" else f"{value}n" if kind == "Bigint" else str(value)
    if isinstance(value, float):
        return f"{value}f" if lang == "java" and kind == "float" else str(value)
    if lang == "java" and isinstance(value, list):  # the forms BFCL's java_type_converter parses
        items = ", ".join(json.dumps(v) if isinstance(v, str) else str(_as_source(v, lang, None)) for v in value)
        return f"new int[]{{{items}}}" if kind == "Array" else f"new ArrayList<>(Arrays.asList({items}))"
    if lang == "java" and isinstance(value, dict):
        puts = " ".join(f"put({json.dumps(k)}, {json.dumps(v) if isinstance(v, str) else _as_source(v, lang, None)});"
                        for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    return json.dumps(value)


def reference_calls(ground_truth: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]] = (),
                    lang: str = "python") -> str:
    """One correct call set of a possible-answer record in tts's canonical form: each call's name
    as offered, each argument's first possible value (Java and JavaScript values written as source).

    An argument whose possibilities include "" (BFCL's mark for "may be left out") is left out when
    "" comes first and the function does not require it, or when the function does not have it at
    all (a few records list such extra arguments); a required one takes its first other value.
    """
    specs = {f["name"]: f.get("parameters") or {} for f in functions}
    calls = []
    for entry in ground_truth:
        (name, params), = entry.items()
        spec = specs.get(name)
        properties = (spec or {}).get("properties") or {}
        required = set((spec or {}).get("required") or ())
        args = {}
        for key, values in params.items():
            options = [v for v in values if v != ""]
            optional = len(options) < len(values)
            if not options or (optional and spec is not None and (key not in properties or
                                                                  (values[0] == "" and key not in required))):
                continue
            kind = (properties.get(key) or {}).get("type")
            args[key] = _as_source(_first(options[0]), lang, kind)
        calls.append(ToolCall(tool_name(name), json.dumps(args, ensure_ascii=False), ""))
    return calls_answer(calls)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return str(content or "")


def load_category(category: str, root: Path, limit: int | None = None) -> list[Problem]:
    """The problems of one category from bfcl-eval's data folder ``root``, in BFCL's order."""
    prompt_file = root / f"{VERSION_PREFIX}_{category}.json"
    if not prompt_file.exists():
        raise BFCLSetupError(f"{prompt_file} does not exist: the bfcl-eval in that environment is not the "
                             f"version tts reads ({VERSION_PREFIX} data); rebuild it with `make bfcl-env`.")
    rows = read_jsonl(prompt_file)
    answers: dict[str, Any] = {}
    if not is_irrelevance(category):
        answer_file = root / "possible_answer" / prompt_file.name
        answers = {row["id"]: row["ground_truth"] for _, row in read_jsonl(answer_file)}
    problems = []
    for lineno, row in rows[:limit]:
        turns = row.get("question") or []
        if len(turns) != 1:
            raise DatasetError(f"{prompt_file}, line {lineno}: {len(turns)} turns; bfcl:{category} serves single-turn "
                               "entries only.")
        messages = [dict(m) for m in turns[0]]
        users = [m for m in messages if m.get("role") == "user"]
        meta: dict[str, Any] = {
            "category": category, "language": language(category), "messages": messages,
            "tools": openai_tools(row["function"], category), "bfcl_functions": row["function"],
        }
        if is_irrelevance(category):
            gold = NO_CALL_ANSWER
        else:
            if row["id"] not in answers:
                raise DatasetError(f"{prompt_file}, line {lineno}: no possible answer for {row['id']!r} in "
                                   f"{root / 'possible_answer' / prompt_file.name}.")
            meta["bfcl_ground_truth"] = answers[row["id"]]
            gold = reference_calls(answers[row["id"]], row["function"], language(category))
        problems.append(Problem(row["id"], _text(users[-1]["content"]) if users else "", gold, meta))
    if not problems:
        raise DatasetError(f"{prompt_file} holds no problems.")
    return problems


class BFCLBenchmark(Benchmark):
    """One BFCL category (``category``); subclasses per category are made by :func:`category_benchmark`."""

    name = "bfcl"
    category: ClassVar[str] = "simple_python"
    prompt = PLAIN_PROMPT

    def load(self, path: Path | None = None, limit: int | None = None, *fields: Any, **options: Any) -> list[Problem]:
        """The category's problems from bfcl-eval's data (``path``: a bfcl-eval data folder instead).

        Raises:
            BFCLSetupError: bfcl-eval's environment is missing (the message says how to make it).
        """
        self.check_options(options)
        if limit is not None and limit < 1:
            raise DatasetError(f"--limit must be at least 1, got {limit}")
        if any(fields):
            raise DatasetError(f"{self.name} reads BFCL's own fields; drop --id-field/--question-field/--answer-field.")
        root = Path(path) if path is not None else data_dir()
        return load_category(self.category, root, limit)

    def grader(self, timeout: int) -> Any:
        """BFCL's own checker, run in bfcl-eval's environment (:class:`tts.benchmarks.bfcl_grading.BFCLGrader`)."""
        from tts.benchmarks.bfcl_grading import BFCLGrader

        return BFCLGrader(timeout=timeout)


def category_benchmark(name: str) -> type[BFCLBenchmark]:
    """The benchmark class of ``bfcl:<name>`` (BFCL's category name or an alias)."""
    category = canonical_category(name)
    return type(f"BFCL_{category}", (BFCLBenchmark,), {"name": f"bfcl:{name}", "category": category,
                                                        "__module__": __name__})


def __getattr__(attr: str) -> type[BFCLBenchmark]:
    """``tts.benchmarks.bfcl:simple_python`` and friends, for the benchmark registry's lazy entries."""
    if attr in CATEGORIES or attr in ALIASES:
        return category_benchmark(attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
