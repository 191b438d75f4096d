"""Encoders: the bundled-model registry, SimCSE poolers, loading and encoding."""

# The poolers of :mod:`subspaces.models.pooling`, named here so a command's choices need not import torch.
POOLERS = ("cls", "cls_before_pooler", "mean", "avg_first_last", "avg_top2")
LAYER_POOLERS = ("avg_first_last", "avg_top2")  # read hidden layers, not only the last
