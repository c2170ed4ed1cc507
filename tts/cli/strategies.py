"""``tts strategies``: the registered strategies (built-in and plugins) and their settings."""

from __future__ import annotations

from typing import Annotated

import typer


def _shown(value: object) -> str:
    """A default as a user would type it: ``'\\n\\n'`` rather than two line breaks."""
    if isinstance(value, str) and not value.isprintable():
        return repr(value)
    return str(value)


def strategies_command(
    name: Annotated[str | None, typer.Argument(help="One strategy: each of its settings with its default and meaning.")] = None,
) -> None:
    """List every registered strategy with its settings and what it does (or one strategy in full)."""
    from rich.console import Console
    from rich.table import Table

    from tts.registry import STRATEGIES, UnknownNameError

    if name is not None:
        try:
            STRATEGIES.check(name)
        except UnknownNameError as exc:
            raise typer.BadParameter(str(exc), param_hint="NAME") from None
        Console().print(_one_strategy(name))
        return
    table = Table("strategy", "settings (default)", "what it does", title="registered strategies")
    for name in STRATEGIES.names():
        cls = STRATEGIES.load(name)
        fields = {k: f for k, f in cls.config_class.model_fields.items() if k != "kind"}
        doc = (cls.config_class.__doc__ or cls.__doc__ or "").strip().splitlines()[0]
        shown = [f"{k} (required)" if f.is_required() else f"{k}={_shown(f.default)}" for k, f in fields.items()]
        table.add_row(name, ", ".join(shown), doc)
    Console().print(table)
    Console().print("One strategy's settings in full: tts strategies NAME")


def _one_strategy(name: str):  # noqa: ANN202 - a rich Table
    """A strategy's settings, each with its default and its field docstring (pydantic reads them as
    descriptions: ``use_attribute_docstrings``)."""
    from rich.table import Table

    from tts.registry import STRATEGIES

    cls = STRATEGIES.load(name)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    table = Table("setting", "default", "meaning", title=f"{name}: {' '.join(doc.split())}", title_justify="left")
    for key, f in cls.config_class.model_fields.items():
        if key != "kind":
            default = "(required)" if f.is_required() else _shown(f.default)
            table.add_row(key, default, " ".join((f.description or "").split()))
    return table
