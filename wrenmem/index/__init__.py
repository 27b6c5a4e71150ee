"""The derived LanceDB index of pairs: its table, its state mirror, and the one sync that keeps it
in step with the files.
"""
