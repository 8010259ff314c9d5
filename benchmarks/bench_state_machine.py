"""State-machine steps per second on the mock (what CI can afford), overall and inside the
rules alone (Hypothesis's own machinery excluded). Target: at least 1,000 steps per second."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import device_factory, format_table, parse_args  # noqa: E402

from lifecore.testing.stream_benchmarks import machine_steps_per_second  # noqa: E402

if __name__ == "__main__":
    args = parse_args(__doc__ or "")
    row = machine_steps_per_second(device_factory(args), examples=20, steps=50)
    print(format_table([row]))
