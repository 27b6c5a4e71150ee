"""Files on disk: atomic writes, reading regular files only, the state folder, encodings."""
