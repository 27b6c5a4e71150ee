"""The derived LanceDB index of pairs, by job: the pairs table and the one sync that keeps it
in step with the files (the modules here: ``table``, ``sync``, ``state``, ``snapshot``...),
the in-memory read copy a long-lived process searches (:mod:`wrenmem.index.readcopy`), and
the team index, a shared ``index_uri`` read by many checkouts (:mod:`wrenmem.index.team`).
"""
