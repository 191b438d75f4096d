"""Knowledge-graph completion as text retrieval: SimKGC's bi-encoder and Hyper-CL's tri-encoder.

Modules, in the order data flows through them:

* :mod:`~subspaces.kgc.data` -- WN18RR (SimKGC layout) and FB15k-237 readers -> :class:`KnowledgeGraph`;
* :mod:`~subspaces.kgc.graph` -- known tails per (head, relation) and the link graph of training neighbours;
* :mod:`~subspaces.kgc.texts` -- entity texts ("name: description", neighbour names for short ones);
* :mod:`subspaces.models.conditional` -- the models, shared with :mod:`subspaces.cond`: the bi-encoder (SimKGC)
  and the tri-encoder (Hyper-CL);
* :mod:`subspaces.losses.simkgc` -- SimKGC's loss (margin, learnable temperature, masks, pre-batch, self-negatives);
* :mod:`~subspaces.kgc.recipes` -- ``KGCTrainConfig`` (every setting of a run) and released configurations;
* :mod:`~subspaces.kgc.train` -- the task on the shared engine: triple batches, the loss step;
* :mod:`~subspaces.kgc.ranking` -- filtered MR / MRR / Hits@k, forward, backward and average;
* :mod:`~subspaces.kgc.pipeline` -- ``train_pipeline`` and ``evaluate_model``, one call each (entity and query
  vectors through the model's embedding store); MRR on dev.
"""
