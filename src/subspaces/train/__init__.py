"""Training: a small, resumable, DDP-aware loop for sentence-transformers models and losses."""
