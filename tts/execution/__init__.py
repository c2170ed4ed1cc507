"""Running model-written code: a bubblewrap sandbox with limits, one process per program."""

from tts.execution.sandbox import (
    Execution,
    Limits,
    Program,
    SandboxUnavailableError,
    bwrap_path,
    run_many,
    run_program,
)

__all__ = ["Execution", "Limits", "Program", "SandboxUnavailableError", "bwrap_path", "run_many", "run_program"]
