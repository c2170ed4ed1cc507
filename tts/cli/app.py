"""The ``tts`` command: a typer app whose sub-commands live one per module in this package.

Only typer is imported here; each command imports the library (and through it vLLM/torch) inside
its function, so ``tts --help`` answers in a fraction of a second.
"""

from __future__ import annotations

import signal
import sys

import typer

from tts.cli import budget, cost, graph_search, models, show, stage_plan, strategies, sweep
from tts.cli import eval as eval_cmd
from tts.cli import mcp as mcp_cmd
from tts.cli import serve as serve_cmd
from tts.cli.stopped import exit_on_signal, interrupt_on_signal

app = typer.Typer(
    name="tts",
    help="Test-time compute scaling for LLMs: strategies, budgets and a cost model on vLLM.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("eval")(eval_cmd.eval_command)
app.command("strategies")(strategies.strategies_command)
app.command("show")(show.show_command)
app.command("view")(show.view_command)
app.command("sweep")(sweep.sweep_command)
app.command("plot")(sweep.plot_command)
app.command("graph-search")(graph_search.graph_search_command)
app.command("stage-plan")(stage_plan.stage_plan_command)
app.command("serve")(serve_cmd.serve_command)
app.command("mcp")(mcp_cmd.mcp_command)
app.add_typer(models.app, name="models", help="Prepare models for the engine (GGUF -> safetensors).")
app.add_typer(cost.app, name="cost", help="Price a strategy in FLOPs, bytes, eFLOPs and GPU-seconds.")
app.add_typer(budget.app, name="budget", help="Budget allocation: replay the allocator on a sample pool.")


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details.")) -> None:
    from tts.cli.console_log import configure

    configure(verbose)
    from tts.serve.gc_tuning import tune_gc  # here, not at the top: `tts --help` imports no pydantic

    tune_gc()  # start-up's objects frozen, fewer young collections (see tune_gc)


def main() -> None:
    """Console-script entry point.

    SIGTERM (``kill``, ``timeout``, a job scheduler) ends every command the way Ctrl-C does, through
    its ``finally`` blocks: an eval or sweep then shuts its engine down (a vLLM engine runs in
    processes of its own, which Python's default, dying at once, leaves running) with every
    finished result already on disk. ``tts serve`` and ``tts mcp`` set their own handler.
    """
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, interrupt_on_signal)
    # A vLLM engine's processes register shared memory with multiprocessing's resource tracker; one
    # stopped by Ctrl-C leaves it registered, and the tracker, which frees it, then warned of
    # "leaked shared_memory objects" under tts's own "stopped ... run the same command to resume"
    # line. The tracker process is started with this process's warning options.
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    sys.exit(app())
