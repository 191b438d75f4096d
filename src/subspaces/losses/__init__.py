"""Losses: ``nn.Module``s that take the model (sentence-transformers style) plus their functional cores."""
