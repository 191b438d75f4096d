"""Encoders: the bundled-model registry, SimCSE poolers, loading and encoding."""
