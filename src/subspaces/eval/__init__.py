"""Evaluators: callables that take a model and return a dict of named metrics."""
