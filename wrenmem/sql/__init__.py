"""SQL helpers over sqlglot: the checks a pair's SQL must pass, parse bounds, labels."""
