"""tts.config.settings_line: every settings refusal in one line that names the field and what to change."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tts.config import SettingsError, settings_line


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k: int = Field(1, ge=1)


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(4, ge=1)
    mode: Literal["a", "b"] = "a"
    name: str
    inner: _Inner = _Inner()
    items: list[_Inner] = []

    @model_validator(mode="after")
    def _not_both(self) -> _Settings:
        if self.n == 7 and self.mode == "b":
            raise ValueError("N=7 and mode b cannot go together")
        return self


def _refusal(**values) -> ValidationError:
    with pytest.raises(ValidationError) as err:
        _Settings(**values)
    return err.value


def test_a_value_out_of_range_names_the_field_its_value_and_the_change() -> None:
    assert settings_line(_refusal(name="x", n=0)) == (
        "n=0 is refused (input should be greater than or equal to 1); change n")
    assert settings_line(_refusal(name="x", n=0), "strategy 'vote'") == (
        "strategy 'vote': n=0 is refused (input should be greater than or equal to 1); change n")


def test_missing_and_unknown_fields_are_said_as_such() -> None:
    assert settings_line(_refusal()) == "name is required; change name"
    assert settings_line(_refusal(name="x", colour=3)) == "colour is not a setting of it; change colour"


def test_several_errors_are_joined_and_each_field_is_named_once() -> None:
    line = settings_line(_refusal(n=0, mode="c", inner={"k": 0}, items=[{"k": 0}, {"k": -1}]))
    assert line == (
        "n=0 is refused (input should be greater than or equal to 1); "
        "mode='c' is refused (input should be 'a' or 'b'); name is required; "
        "inner.k=0 is refused (input should be greater than or equal to 1); "
        "items.k=0 is refused (input should be greater than or equal to 1); "
        "items.k=-1 is refused (input should be greater than or equal to 1); "
        "change n, mode, name, inner.k, items.k")
    assert "\n" not in line


def test_a_long_value_is_cut_to_forty_characters() -> None:
    line = settings_line(_refusal(name="x", mode="m" * 38))  # repr: 40 characters, kept whole
    assert f"mode='{'m' * 38}' is refused" in line
    line = settings_line(_refusal(name="x", mode="m" * 39))  # repr: 41 characters, cut to 37 + "..."
    assert f"mode='{'m' * 36}... is refused" in line


def test_an_error_of_the_whole_model_keeps_its_message_and_names_no_field() -> None:
    # pydantic's message is "Value error, N=7 ..."; only its first letter is lowered.
    assert settings_line(_refusal(name="x", n=7, mode="b")) == "value error, N=7 and mode b cannot go together"


def test_any_other_error_is_its_text_on_one_line_without_links() -> None:
    exc = ValueError("bad budget\n  see https://example.org/budgets for more [type=value_error, input_value=3]\n"
                     "For further information visit https://errors.pydantic.dev/2/v/value_error")
    assert settings_line(exc, "budget") == "budget: bad budget see for more"
    assert settings_line(KeyError()) == "KeyError"
    assert settings_line(RuntimeError("  "), "x") == "x: RuntimeError"


def test_a_settings_error_is_a_value_error() -> None:
    assert issubclass(SettingsError, ValueError)
