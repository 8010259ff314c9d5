"""Capture a graph on the first available backend (cuda, else hip, else the mock) and replay it."""

from __future__ import annotations

import struct

import lifecore
from lifecore import kernels


def main() -> None:
    with lifecore.Device("auto") as device:
        stream = device.stream()
        x, y = stream.alloc(4 * 256), stream.alloc(4 * 256)
        stream.write(x, struct.pack("<256f", *range(256)))
        stream.fill(y, lifecore.float_bits(1.0))

        def step(s: lifecore.Stream) -> None:
            s.launch(kernels.axpy_f32, 4, 64, [256, 2.0, x, y])   # y = 2*x + y

        with stream.capture(step, warmup=1) as graph:   # the warmup runs; the recorded pass does not
            graph.replay()
            graph.replay()
        first: tuple[float, ...] = struct.unpack("<4f", stream.read(y)[:16])
        print(device.backend, first)
        assert first == (1.0, 7.0, 13.0, 19.0)


if __name__ == "__main__":
    main()
