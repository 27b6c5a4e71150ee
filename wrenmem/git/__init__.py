"""Git integration: hook install/run and the pull-request diff.
"""
