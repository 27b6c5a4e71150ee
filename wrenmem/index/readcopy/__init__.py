"""The in-memory read copy of the pairs table a long-lived process searches (:mod:`.held`),
and its exact vector scan (:mod:`.vectorscan`)."""
