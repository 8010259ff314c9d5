"""A prepare -> begin -> end cycle through the Python API vs the same transitions on the
pure-Python reference model (the lifecycle's own overhead)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import device_factory, format_table, parse_args  # noqa: E402

from lifecore.testing.stream_benchmarks import capture_cycle_vs_model  # noqa: E402

if __name__ == "__main__":
    args = parse_args(__doc__ or "")
    print(format_table(capture_cycle_vs_model(device_factory(args))))
