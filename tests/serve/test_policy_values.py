"""How the server's request policy reads a client's values: a number, a boolean or a choice only in
its own JSON type, what a refusal says the setting takes, when a client value counts as the
configured one, and the one-line form of a config error."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from tts.serve.policy import (
    PolicyError,
    _knob_accepts,
    _knob_expects,
    _same,
    is_knob,
    setting_error,
)


@pytest.mark.parametrize("annotation, value, accepted", [
    (int, 3, True), (int, True, False), (int, 3.0, False), (int, "3", False),
    (float, 3, True), (float, 0.5, True), (float, False, False), (float, "0.5", False),
    (bool, True, True), (bool, 1, False),
    (int | None, None, True), (int, None, False),
    (Literal["a", "b"], "a", True), (Literal["a", "b"], "c", False), (Literal[1, 2], True, False),
    (Literal[1, 2], 1, True), (Annotated[int, Field(ge=1)], 2, True), (Annotated[int, Field(ge=1)], "2", False),
])
def test_a_knob_takes_only_values_of_its_own_json_type(annotation, value, accepted):
    assert _knob_accepts(annotation, value) is accepted


def test_what_a_knob_takes_is_said_once_per_kind():
    assert _knob_expects(int) == "a number"
    assert _knob_expects(int | float | None) == "a number or null"
    assert _knob_expects(bool) == "true or false"
    assert _knob_expects(Literal["min", "last"] | None) == "one of 'min', 'last' or null"


def test_knobs_are_numbers_booleans_and_choices_only():
    assert is_knob(int) and is_knob(Annotated[float | None, Field(ge=0)]) and is_knob(Literal["a"])
    assert not is_knob(str) and not is_knob(int | str) and not is_knob(list[int])


class _Inner(BaseModel):
    kind: str = "judge"
    votes: int = 1


@pytest.mark.parametrize("client, configured, same", [
    ([1, 2], (1, 2), True), ((1, 2), [1, 2], True), ([1, 2], [1, 2, 3], False), ([1, 2], [1, 3], False),
    ([[1, 2]], ((1, 2),), True), ([], (), True),
    (["a", "b"], "ab", False), ("ab", ["a", "b"], False), (["a"], "a", False),
    (True, True, True), (1, True, False), (True, 1, False), (0, False, False), (2, 2.0, True), ("a", "a", True),
    ({"kind": "judge", "votes": 1}, _Inner(), True), ({"kind": "judge"}, _Inner(kind="judge"), True),
    ({"kind": "judge", "votes": 2}, _Inner(), False), ({"kind": "judge"}, _Inner(), False), ("judge", _Inner(), False),
])
def test_a_client_value_is_the_configured_one_only_as_the_same_data(client, configured, same):
    assert _same(client, configured) is same


class _WithTuple(BaseModel):
    kind: str = "judge"
    items: tuple[int, ...] = ()
    votes: int = 1


def test_a_nested_config_is_compared_as_json_whether_the_client_sends_every_field_or_the_set_ones():
    configured = _WithTuple(items=(1, 2))  # votes left at its default
    assert _same({"kind": "judge", "items": [1, 2], "votes": 1}, configured)  # every field, as JSON
    assert _same({"items": [1, 2]}, configured)  # only the fields the operator set, as JSON
    assert not _same({"items": [1, 2], "votes": 1}, configured)  # neither all nor only the set ones
    assert not _same({"items": [2, 1]}, configured)


def test_a_config_error_is_one_line_naming_its_field():
    class Config(BaseModel):
        n: int = Field(ge=1)
        inner: _Inner | None = None

    with pytest.raises(ValidationError) as err:
        Config.model_validate({"n": 0, "inner": {"votes": "x"}})
    assert setting_error(err.value) == ("n: Input should be greater than or equal to 1; "
                                        "inner.votes: Input should be a valid integer, unable to parse string as an integer")
    with pytest.raises(ValidationError) as err:
        Config.model_validate([])
    assert setting_error(err.value).startswith("config: ")
    assert setting_error(ValueError("first line\nmore")) == "first line"
    assert setting_error(ValueError()) == "ValueError"


def test_a_policy_error_names_the_input_and_the_kind_of_refusal():
    err = PolicyError("too many", param="max_tokens", code="over_cap")
    assert (str(err), err.param, err.code) == ("too many", "max_tokens", "over_cap")
    plain = PolicyError("no")
    assert (plain.param, plain.code) == ("tts.strategy", None)
