"""An explicit cache of open generators, keyed by their full backend config.

Engines are expensive to start (tens of seconds) and hold memory until closed, so tts never
caches them implicitly: code that wants warm engines across calls holds an :class:`EnginePool`
and closes it. The key is the config's whole JSON, so two configs that differ in any setting
(model, context length, KV size, memory fraction, seed, ...) get two engines. With ``max_size``
the least recently used generator is closed before a new one opens, so memory stays bounded.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Self

from tts.backends.base import Generator
from tts.types import Problem

logger = logging.getLogger(__name__)


def config_key(config: Any) -> str:
    """The pool key of a backend config: its full JSON (every field, ``kind`` included)."""
    return config.model_dump_json()


class EnginePool:
    """Open generators by backend config; ``get`` reuses, ``close``/``close_all`` shut them down.

    Args:
        max_size: Most generators open at once; opening one more first closes the least recently
            used. None: no limit (memory is the caller's concern).
        factory: Builds a generator from ``(config, problems)``; default
            :func:`tts.backends.factory.create_generator`.

    Example:
        >>> with EnginePool(max_size=2) as pool:  # doctest: +SKIP
        ...     small = pool.get(VLLMBackendConfig(model="smollm2-135m"))
        ...     other = pool.get(VLLMBackendConfig(model="/models/qwen2.5-0.5b"))
        ...     assert pool.get(VLLMBackendConfig(model="smollm2-135m")) is small
    """

    def __init__(self, max_size: int | None = None,
                 factory: Callable[[Any, Sequence[Problem]], Generator] | None = None) -> None:
        if max_size is not None and max_size < 1:
            raise ValueError(f"EnginePool max_size must be >= 1 or None, got {max_size}")
        self.max_size = max_size
        self._factory = factory
        self._open: OrderedDict[str, Generator] = OrderedDict()  # least recently used first
        # One lock for the whole get: two threads asking for the same config must not start two
        # engines (each would hold its own memory).
        self._lock = threading.RLock()

    def _create(self, config: Any, problems: Sequence[Problem]) -> Generator:
        if self._factory is not None:
            return self._factory(config, problems)
        from tts.backends.factory import create_generator

        return create_generator(config, problems)

    def get(self, config: Any, problems: Sequence[Problem] = ()) -> Generator:
        """The open generator for ``config``, started now if the pool has none.

        Args:
            config: A backend config (VLLMBackendConfig, ...).
            problems: Passed to the factory when a generator is created (the scripted backend
                builds its answers from them); ignored when one is reused.
        """
        key = config_key(config)
        with self._lock:
            gen = self._open.get(key)
            if gen is not None and not getattr(gen, "closed", False):
                self._open.move_to_end(key)
                return gen
            # Closed behind the pool's back (gen.close() by its user): forget it and start afresh.
            self._open.pop(key, None)
            while self.max_size is not None and len(self._open) >= self.max_size:
                old_key, old = self._open.popitem(last=False)
                logger.info("engine pool full (%d): closing the least recently used %s", self.max_size,
                            getattr(old, "model_name", old_key))
                old.close()
            gen = self._create(config, problems)
            self._open[key] = gen
            return gen

    def close(self, config: Any) -> bool:
        """Close and drop the generator for ``config``; False if the pool had none."""
        with self._lock:
            gen = self._open.pop(config_key(config), None)
        if gen is None:
            return False
        gen.close()
        return True

    def close_all(self) -> None:
        """Close every generator in the pool (the pool stays usable)."""
        with self._lock:
            gens = list(self._open.values())
            self._open.clear()
        first_error: Exception | None = None
        for gen in gens:
            try:
                gen.close()
            except Exception as exc:  # close the others before reporting
                logger.warning("closing %s failed", getattr(gen, "model_name", gen), exc_info=True)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def __contains__(self, config: Any) -> bool:
        gen = self._open.get(config_key(config))
        return gen is not None and not getattr(gen, "closed", False)

    def __len__(self) -> int:
        return len(self._open)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()

    def __repr__(self) -> str:
        return f"EnginePool({len(self._open)} open, max_size={self.max_size})"
