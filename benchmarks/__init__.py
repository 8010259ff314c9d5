"""Graph-capture benchmarks: each script prints ratios measured side by side in one run.
Run one as ``python benchmarks/NAME.py``, or all of them as ``lifecore bench``."""
