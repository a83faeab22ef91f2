"""`make bench`: the worker's throughput, latency and footprint against the limits of its parts.

Run as `python -m bench.run`. Everything here measures; nothing here asserts a timing: the
figures and their ratios are written to `bench/results.json` and printed: a table of the raw
figures, then the summary, which compares each with its target (`bench.summary`). The package
is kept out of the pytest suite (tests/ only).
"""

__all__: list[str] = []
