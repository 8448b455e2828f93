"""attncore's benchmark: run with ``python -m bench.run`` (see bench/README.md)."""
