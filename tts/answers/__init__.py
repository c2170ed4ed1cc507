"""Answers as a mathematician reads them: extraction from model output, normalisation, and
equivalence keys so that equal answers written differently vote together."""

from tts.answers.equivalence import AnswerKeys, answer_keys, vote_form
from tts.answers.extraction import MAX_CHARS, extract_answer, normalize_answer

__all__ = ["MAX_CHARS", "AnswerKeys", "answer_keys", "extract_answer", "normalize_answer", "vote_form"]
