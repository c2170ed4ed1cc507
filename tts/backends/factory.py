"""Build a Generator from a backend config: the registry maps ``kind`` to a class."""

from __future__ import annotations

from collections.abc import Sequence

from tts.backends.base import Generator
from tts.registry import BACKENDS
from tts.types import Problem


def create_generator(config: object, problems: Sequence[Problem] = ()) -> Generator:
    """Instantiate the backend named by ``config.kind`` through its ``from_config``.

    Args:
        config: A backend config (:data:`tts.config.BackendConfig`: a built-in one or a plugin's).
        problems: The problems of the run; the scripted backend builds its per-problem answer
            distributions from their gold answers (tests and docs only).
    """
    return BACKENDS.load(config.kind).from_config(config, problems)  # type: ignore[attr-defined]
