"""The LanceDB store, its locks and object-storage errors."""
