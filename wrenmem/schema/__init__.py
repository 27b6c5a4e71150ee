"""The Wren MDL manifest: loading, describing, schema items, their index and `fetch`, and seed
generation.
"""
