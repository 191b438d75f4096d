"""Knowledge-graph completion as text retrieval: SimKGC's bi-encoder and Hyper-CL's tri-encoder.

Data flows through :mod:`~subspaces.kgc.data` (the graphs), :mod:`~subspaces.kgc.texts` (entity texts),
:mod:`~subspaces.kgc.train` (SimKGC's loss on the shared engine) and :mod:`~subspaces.kgc.ranking` (filtered rank
metrics); :mod:`~subspaces.kgc.pipeline` runs them in one call each.
"""
