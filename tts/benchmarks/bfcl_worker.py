"""BFCL's checker as a worker process: runs in bfcl-eval's own environment, never in tts's.

Started by :class:`tts.benchmarks.bfcl_grading.BFCLGrader` as ``<bfcl python> bfcl_worker.py``; it
imports only the standard library and bfcl_eval (not tts). Protocol, one JSON object per line:
the worker writes ``{"ready": true}`` once bfcl_eval is imported (or ``{"fatal": "..."}``), then
answers each request ``{"items": [...]}`` with ``{"results": [...]}``, one result per item, in order.

An item is ``{"category", "functions", "ground_truth", "calls"}``: the functions as BFCL's data file
has them, the possible-answer record (absent for irrelevance), and the model's calls decoded as
BFCL's FC handlers decode them (``OpenAICompletionsHandler.decode_ast``): a list of
``{name: {argument: value}}``, names as the model wrote them (dots offered as underscores). A result
is ``{"valid": bool, "error": [...], "error_type": str}``, BFCL's own record.

What is run mirrors ``bfcl_eval.eval_checker.eval_runner``:

- relevance categories (``irrelevance``, ``live_irrelevance``): ``_evaluate_single_relevance_entry``'s
  rule: the reply "contains a call" unless ``utils.is_empty_output`` says the decoded output is
  empty; irrelevance is right iff it contains none;
- the others: ``_evaluate_single_ast_entry``: ``utils.is_function_calling_format_output`` first,
  then ``ast_checker(functions, calls, ground_truth, language, category, model_name)``.

``model_name`` is :data:`MODEL_NAME`, an OpenAI FC model of BFCL's table whose config has
``underscore_to_dot``: the checker then compares the model's underscored names with the dotted
function names converted the same way (``ast_checker.convert_func_name``), as BFCL grades the
models it offers underscored names to.
"""

from __future__ import annotations

import json
import sys
import traceback

MODEL_NAME = "gpt-4o-2024-11-20-FC"
"""The BFCL model whose checker settings apply: a native function-calling model with dots in
function names offered as underscores (``underscore_to_dot``)."""


def _send(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> None:
    """Import bfcl_eval, say ready, then check one request per input line until the input closes."""
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
        from bfcl_eval.utils import is_empty_output, is_function_calling_format_output
    except Exception as exc:  # noqa: BLE001 (report it: the parent says what to fix)
        _send({"fatal": f"importing bfcl_eval failed: {type(exc).__name__}: {exc}"})
        return
    config = MODEL_CONFIG_MAPPING.get(MODEL_NAME)
    if config is None or not config.underscore_to_dot:
        _send({"fatal": f"bfcl-eval's model table has no {MODEL_NAME} with underscore_to_dot; this bfcl-eval "
                        "is not the version tts reads (rebuild with `make bfcl-env`)."})
        return
    languages = {"python": Language.PYTHON, "java": Language.JAVA, "javascript": Language.JAVASCRIPT}

    def check(item: dict) -> dict:
        category, calls = item["category"], item["calls"]
        if "irrelevance" in category or "relevance" in category:
            contains_call = not is_empty_output(calls)
            ok = not contains_call if "irrelevance" in category else contains_call
            if ok:
                return {"valid": True, "error": []}
            if "irrelevance" in category:
                return {"valid": False, "error": ["Valid syntax. Successfully decode AST when it should not."],
                        "error_type": "irrelevance_error:decoder_success"}
            return {"valid": False, "error": ["No function call."], "error_type": "relevance_error:decoder_failed"}
        if not is_function_calling_format_output(calls):
            return {"valid": False, "error": ["Did not output in the specified format."],
                    "error_type": "ast_decoder:decoder_wrong_output_format"}
        return ast_checker(item["functions"], calls, item["ground_truth"], languages[item["language"]],
                           category, MODEL_NAME)

    _send({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        results = []
        for item in json.loads(line)["items"]:
            try:
                result = check(item)
                results.append({"valid": bool(result["valid"]), "error": result.get("error", []),
                                "error_type": result.get("error_type", "")})
            except Exception as exc:  # noqa: BLE001 (the checker failed on this item: no verdict)
                results.append({"valid": None, "error": [f"{type(exc).__name__}: {exc}"],
                                "error_type": "checker_crashed", "trace": traceback.format_exc(limit=3)})
        _send({"results": results})


if __name__ == "__main__":
    main()
