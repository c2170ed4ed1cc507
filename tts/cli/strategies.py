"""``tts strategies``: the registered strategies (built-in and plugins) and their settings."""

from __future__ import annotations


def _shown(value: object) -> str:
    """A default as a user would type it: ``'\\n\\n'`` rather than two line breaks."""
    if isinstance(value, str) and not value.isprintable():
        return repr(value)
    return str(value)


def strategies_command() -> None:
    """List every registered strategy with its settings and what it does."""
    from rich.console import Console
    from rich.table import Table

    from tts.registry import STRATEGIES

    table = Table("strategy", "settings (default)", "what it does", title="registered strategies")
    for name in STRATEGIES.names():
        cls = STRATEGIES.load(name)
        fields = {k: f for k, f in cls.config_class.model_fields.items() if k != "kind"}
        doc = (cls.config_class.__doc__ or cls.__doc__ or "").strip().splitlines()[0]
        shown = [f"{k} (required)" if f.is_required() else f"{k}={_shown(f.default)}" for k, f in fields.items()]
        table.add_row(name, ", ".join(shown), doc)
    Console().print(table)
