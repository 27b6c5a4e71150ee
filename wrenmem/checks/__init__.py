"""Checks over pair files: validation (SQL and schema references) and duplicates.
"""
