"""The watcher (filesystem events -> sync) and its warm daemon on a local socket.
"""
