"""Where tts keeps files it derives: converted models, calibration results."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The tts cache directory: ``$TTS_CACHE`` if set, else the platform's user cache dir + ``tts``.

    Created on first use.
    """
    env = os.environ.get("TTS_CACHE")
    if env:
        path = Path(env).expanduser()
    else:
        from platformdirs import user_cache_dir

        path = Path(user_cache_dir("tts"))
    path.mkdir(parents=True, exist_ok=True)
    return path
