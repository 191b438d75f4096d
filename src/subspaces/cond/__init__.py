"""Conditional similarity (C-STS, Hyper-CL): "how similar are two sentences with respect to condition c".

- the models are shared with :mod:`subspaces.kgc`: :mod:`subspaces.models.conditional` (the tri-encoder and the
  bi-encoder behind one protocol, ``build_model`` / ``load_model``).
- :mod:`subspaces.cond.sampler`: shuffled rows, or (high, low) condition pairs kept in one batch.
- :mod:`subspaces.cond.recipe`: :class:`~subspaces.cond.recipe.CondTrainConfig`, every setting of a run.
- :mod:`subspaces.cond.train`: training (head-only on cached embeddings, or fine-tuning) and evaluation.
- :mod:`subspaces.cond.metrics`: accuracy at a dev threshold, AUC, Spearman/Pearson/MSE, seen vs unseen.
- :mod:`subspaces.cond.tasks`, :mod:`subspaces.cond.pipeline`: WiC / C-STS specs and one-call pipelines.
- Conditional search over stored sentence vectors: ``TriEncoder.index_corpus`` / ``TriEncoder.search`` and
  ``subspaces cond search`` (each condition's view of the corpus cached; see ``docs/cond.md``).

Objectives live in :mod:`subspaces.losses.conditional`; data readers in :mod:`subspaces.data.csts` and
:mod:`subspaces.data.wic`.
"""
