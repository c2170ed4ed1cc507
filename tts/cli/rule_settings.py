"""``--set allocation.KEY=VALUE``: the online allocator's rule settings, one spelling for
``tts eval --allocate`` and ``tts budget simulate``.

The keys are :data:`tts.config.ONLINE_RULE_SETTINGS` (fields of ``AllocationConfig``, of
``SimulateConfig`` and of ``OnlinePolicy`` alike), so a setting replayed on a pool is passed to a
live run by copying the flag. Values are read as YAML (``4``, ``0.5``, ``true``, ``[0.97, 0.99]``);
a ladder may also be written ``0.97/0.99``.
"""

from __future__ import annotations

from typing import Any

PREFIX = "allocation."


def rule_setting_keys() -> tuple[str, ...]:
    """The keys ``--set allocation.KEY=VALUE`` takes."""
    from tts.config import ONLINE_RULE_SETTINGS

    return ONLINE_RULE_SETTINGS


def unknown_key_message(item: str, key: str) -> str:
    """The error for a key that is not a rule setting: it names every valid one."""
    return (f"--set {item}: the online allocator has no setting {key!r}; it has: "
            f"{', '.join(rule_setting_keys())} (write --set allocation.KEY=VALUE; --n-max, --chunk and "
            "--budget are flags of their own).")


def rule_setting(key: str, value: Any, item: str) -> tuple[str, Any]:
    """One parsed ``allocation.KEY`` setting, checked: ``(KEY, value)``; ValueError naming the valid
    keys for an unknown one. A ladder written ``0.97/0.99`` becomes a list."""
    if key not in rule_setting_keys():
        raise ValueError(unknown_key_message(item, key))
    if key == "ladder" and isinstance(value, str) and "/" in value:
        try:
            value = [float(v) for v in value.split("/")]
        except ValueError:
            raise ValueError(f"--set {item}: write the ladder as confidences, 0.97/0.99 or [0.97, 0.99]") from None
    return key, value


def parse_rule_settings(items: list[str]) -> dict[str, Any]:
    """``--set allocation.KEY=VALUE`` items (as ``tts budget simulate`` takes them) as a dict of
    rule settings; ValueError for an item that is not ``allocation.KEY=VALUE`` with a known KEY."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith(PREFIX) or not key[len(PREFIX):]:
            bare = key if key and "." not in key else "KEY"
            raise ValueError(f"--set {item!r}: write allocation.KEY=VALUE (e.g. --set allocation.{bare}="
                             f"{raw.strip() or 'VALUE'}); KEY is one of {', '.join(rule_setting_keys())}.")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        name, value = rule_setting(key[len(PREFIX):], value, item)
        out[name] = value
    return out
