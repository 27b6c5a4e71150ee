"""NL→SQL pair files: the format, slugs, the catalog of a knowledge folder, writes, Wren's exchange
format, and seed pairs derived from the manifest.
"""
