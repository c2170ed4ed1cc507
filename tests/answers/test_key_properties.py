"""Answer keys as properties over generated values (tests/answer_forms.py): every way of writing a
value gets one key, and different values (a value and its negative included) get different keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.answer_forms import forms, values
from tts.answers import AnswerKeys


@given(values, st.randoms(use_true_random=False))
def test_every_form_of_a_value_gets_one_key(value, random):
    written = forms(value)
    random.shuffle(written)
    assert len(set(AnswerKeys().keys(written))) == 1, written


@given(st.lists(values, min_size=2, max_size=5, unique=True), st.randoms(use_true_random=False))
def test_different_values_get_different_keys(distinct, random):
    written = [random.choice(forms(v)) for v in distinct]
    assert len(set(AnswerKeys().keys(written))) == len(distinct), written


@given(values.filter(bool), st.randoms(use_true_random=False))
def test_a_value_and_its_negative_never_share_a_key(value, random):
    written = [random.choice(forms(value)), random.choice(forms(-value))]
    keys = AnswerKeys().keys(written)
    assert keys[0] != keys[1], written
