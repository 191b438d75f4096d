"""The ``subspaces`` command line: thin typer commands over the library (no logic a Python user could not call)."""
