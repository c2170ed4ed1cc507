"""``Trace.tree`` of a step-wise search is built when first read (:class:`tts.types.LazyRecords`):
a reply or ``tts.solve`` that never reads it does not pay for thousands of dicts, and whoever reads
it (``tts eval`` writing it out, ``tts show``, a pickle) sees the tuple it always was."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.types import LazyRecords, Trace, to_jsonable
from tts.verifiers.function import FunctionVerifier


def _records(calls: list[int]) -> tuple[dict, ...]:
    calls.append(1)
    return ({"id": 0, "parent": None}, {"id": 1, "parent": 0})


def test_records_are_built_once_on_first_read_and_read_like_the_tuple():
    calls: list[int] = []
    tree = LazyRecords(lambda: _records(calls), 2)
    assert len(tree) == 2 and bool(tree) and calls == []  # length and truth need no build
    assert "not built" in repr(tree)
    assert tree[1] == {"id": 1, "parent": 0} and calls == [1]
    assert list(tree) == list(_records([])) and tree[:1] == ({"id": 0, "parent": None},)
    assert tree == _records([]) and tree != [{"id": 0}] and calls == [1]  # built once
    assert tree._build is None  # what the builder held (the search's nodes) is let go


def test_pickle_copy_and_json_see_a_plain_tuple():
    tree = LazyRecords(lambda: _records([]), 2)
    trace = Trace("beam", tree=tree)
    back = pickle.loads(pickle.dumps(trace))
    assert type(back.tree) is tuple and back.tree == _records([])
    assert type(copy.deepcopy(trace).tree) is tuple
    assert json.loads(json.dumps(to_jsonable(trace)))["tree"] == [dict(r) for r in _records([])]


def test_a_builder_that_returns_another_count_is_an_error_not_a_silent_mismatch():
    with pytest.raises(RuntimeError, match="3 were announced"):
        LazyRecords(lambda: _records([]), 3)[0]


def test_a_search_leaves_its_tree_unbuilt_until_it_is_read(step_model, addition_problems):
    cls = STRATEGIES.load("beam")
    strategy = cls(cls.config_class(n=4), step_model(), MATH_PROMPT.render, SamplingConfig(max_tokens=60),
                   verifier=FunctionVerifier(lambda problem, text: 1.0))
    sol = strategy.solve(addition_problems(2))[0]
    tree = sol.trace.tree
    assert isinstance(tree, LazyRecords) and tree._records is None
    assert len(tree) > 4 and tree[0]["depth"] == 1 and tree._records is not None
    assert sum(1 for node in tree if node["kept"] and node["finished"]) == len(sol.trace.samples)
