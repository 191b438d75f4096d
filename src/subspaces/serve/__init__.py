"""``subspaces serve``: an OpenAI-compatible HTTP embedding server with dynamic batching.

:mod:`~subspaces.serve.settings` (what the server is told), :mod:`~subspaces.serve.batcher` (the one worker
thread that coalesces requests), :mod:`~subspaces.serve.engine` (the loaded model, and what it computes),
:mod:`~subspaces.serve.metrics` (Prometheus), :mod:`~subspaces.serve.app` (the FastAPI app: ``create_app``).
Importing this package imports nothing heavy; FastAPI and torch load when an app is created.
"""
