"""The typer command-line interface: thin shells that build a config and call the library."""
