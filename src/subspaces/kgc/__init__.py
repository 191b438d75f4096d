"""Knowledge-graph completion as text retrieval: SimKGC's bi-encoder and Hyper-CL's tri-encoder.

Modules, in the order data flows through them:

* :mod:`~subspaces.kgc.data` -- WN18RR (SimKGC layout) and FB15k-237 readers -> :class:`KnowledgeGraph`;
* :mod:`~subspaces.kgc.graph` -- known tails per (head, relation) and the link graph of training neighbours;
* :mod:`~subspaces.kgc.texts` -- entity texts ("name: description", neighbour names for short ones);
* :mod:`~subspaces.kgc.models` -- :class:`BiEncoderKGC`, :class:`TriEncoderKGC` (condition heads);
* :mod:`~subspaces.kgc.loss` -- SimKGC's loss (margin, learnable temperature, masks, pre-batch, self-negatives);
* :mod:`~subspaces.kgc.train` -- the training loop;
* :mod:`~subspaces.kgc.embedding_cache`, :mod:`~subspaces.kgc.inference` -- disk and memory caches of embeddings;
* :mod:`~subspaces.kgc.ranking` -- filtered MR / MRR / Hits@k, forward, backward and average;
* :mod:`~subspaces.kgc.pipeline` -- ``train_pipeline`` and ``evaluate_model``, one call each.
"""
