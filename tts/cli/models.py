"""``tts models prepare``: make a model loadable by the engine (converting GGUF once)."""

from __future__ import annotations

import typer

from tts.cli.errors import user_errors

app = typer.Typer(no_args_is_help=True)


@app.command("prepare")
def prepare(
    name_or_path: str = typer.Argument("smollm2-135m", help="smollm2-135m, a hub id, a model directory or a .gguf file."),
) -> None:
    """Prepare NAME_OR_PATH and print where the engine will load it from."""
    with user_errors():
        from tts.models import prepare_model

        model = prepare_model(name_or_path)
    where = "local directory" if model.local else "Hugging Face hub id (vLLM downloads it)"
    typer.echo(f"{model.name}: {model.path} ({where})")
