"""Conditional similarity (C-STS, WiC; Hyper-CL): "how similar are two sentences with respect to condition c".

The models (tri- and bi-encoder) are shared with :mod:`subspaces.kgc` (:mod:`subspaces.models.conditional`); the
objectives are :mod:`subspaces.losses.conditional`; one-call entry points are in :mod:`subspaces.cond.pipeline`.
"""
