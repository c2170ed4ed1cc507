"""The Hugging Face hub as tts meets it: can it be asked, and if not, why not, in words a user can act on.

Benchmarks (``datasets``) and models given as hub ids come from the hub. On a machine that cannot
reach it (a cluster node, an air-gapped lab machine) ``huggingface_hub`` retries each request five
times over about 25 seconds, logging every try, and ``datasets`` then fails with a traceback from
deep inside itself. So tts asks first, once and quickly (:func:`why_unreachable`): one request
with no retries. When the hub cannot be asked, a cached copy is read without any request
(:func:`cache_only`), and a missing one is reported in one sentence by the caller, which knows
what the user can give instead (``--data PATH`` for a benchmark, a local directory for a model).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
"""Seconds the reachability probe waits for the hub's answer."""
_HUB_LOGGERS = ("huggingface_hub", "datasets")


def endpoint() -> str:
    """The hub's address as huggingface_hub uses it: ``$HF_ENDPOINT`` (a mirror) or https://huggingface.co."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def offline_mode() -> bool:
    """Whether the user turned the hub off (``HF_HUB_OFFLINE=1``, as huggingface_hub reads it)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One HEAD request to the hub through huggingface_hub's own HTTP client (so its proxy and
    certificate settings apply), without retries; any answer, even an error status, counts."""
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint(), timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - DNS, refused, timeout, TLS, proxy: all mean "no answer"
        logger.debug("the hub at %s did not answer: %s", endpoint(), exc)
        return False
    return True


def why_unreachable() -> str | None:
    """None when the hub can be asked; otherwise why not, as a clause ("offline mode is on ...")."""
    if offline_mode():
        return "offline mode is on (HF_HUB_OFFLINE=1)"
    if not hub_reachable():
        return f"the hub ({endpoint()}) cannot be reached from this machine"
    return None


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Within the block, ``huggingface_hub`` and ``datasets`` read only their caches, as with
    ``HF_HUB_OFFLINE=1``: no request and so no retries. Both read that setting once, at import,
    into a module constant, so the block sets the constants and restores them after."""
    import datasets.config
    from huggingface_hub import constants

    modules = [constants, datasets.config]
    saved = [m.HF_HUB_OFFLINE for m in modules]
    for m in modules:
        m.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for m, value in zip(modules, saved):
            m.HF_HUB_OFFLINE = value


@contextlib.contextmanager
def quiet_hub_logs() -> Iterator[None]:
    """Keep the hub libraries' warnings (retries, "using the cached version") off the terminal
    while the block runs, unless the user asked for details (``tts -v``); their errors still show."""
    if logging.getLogger("tts").isEnabledFor(logging.INFO):
        yield
        return
    loggers = [logging.getLogger(name) for name in _HUB_LOGGERS]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)
