"""Recall: the shared vocabulary (Hit, Filters), the BM25F (grep) backend and the vector/hybrid
backends.
"""
