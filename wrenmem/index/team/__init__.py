"""The team index: a shared ``index_uri`` (object storage or a shared folder) that one writer
syncs and many checkouts read: the local read copy of a remote index (:mod:`.replica`) and
how far a reader is behind its files (:mod:`.reader`)."""
