"""The graph-capture lifecycle's own overhead, each against the pure-Python reference model
doing the same bookkeeping, interleaved in one run:

1. the transitions alone: ``StreamCaptureState`` prepare -> begin -> end;
2. a whole stream cycle: prepare, one warmup launch, begin, one recorded launch, end, destroy.

    python -m lifecore.benchmarks.capture_cycle --backend mock
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional, Sequence

import lifecore
from lifecore.benchmarks.harness import Run, compare, format_run
from lifecore.models.stream_capture import DeviceModel, Ref, StreamCaptureState as ModelState

__all__ = ["capture_cycle_vs_model", "main"]

ELEMENTS = 16


def capture_cycle_vs_model(factory: Callable[[], Any], *, rounds: int = 15, warmup: int = 2,
                           min_batch_s: float = 0.002) -> list[Run]:
    """Two runs, each lifecore vs the reference model (ratio model / lifecore)."""

    def real_state() -> None:
        state = lifecore.StreamCaptureState()
        state.prepare(0)
        state.begin()
        state.end(0)

    def model_state() -> None:
        state = ModelState()
        state.prepare(0)
        state.begin()
        state.end(0)

    transitions = compare(model_state, real_state, names=("model", "lifecore"), rounds=rounds, warmup=warmup,
                          min_batch_s=min_batch_s, title="StreamCaptureState prepare -> begin -> end")
    device = factory()
    try:
        stream = device.stream()
        x, y = stream.alloc(4 * ELEMENTS), stream.alloc(4 * ELEMENTS)
        axpy = lifecore.kernels.axpy_f32

        def real_cycle() -> None:
            stream.graph_prepare(0)
            stream.launch(axpy, 1, 64, [ELEMENTS, 1.0, x, y])
            stream.begin_capture()
            stream.launch(axpy, 1, 64, [ELEMENTS, 1.0, x, y])
            stream.end_capture(0).destroy()

        model = DeviceModel(device.graphs)
        sid = model.new_stream()
        mx, my = model.alloc(sid, 4 * ELEMENTS), model.alloc(sid, 4 * ELEMENTS)
        args = [ELEMENTS, 1.0, Ref(mx), Ref(my)]

        def model_cycle() -> None:
            model.graph_prepare(sid, 0)
            model.launch(sid, "axpy_f32", args)
            model.begin_capture(sid)
            model.launch(sid, "axpy_f32", args)
            model.destroy(model.end_capture(sid, 0))

        cycle = compare(model_cycle, real_cycle, names=("model", "lifecore"), rounds=rounds, warmup=warmup,
                        min_batch_s=min_batch_s,
                        title=f"stream cycle on {device.backend}/{device.graphs}: prepare, warmup launch, "
                              "begin, launch, end, destroy")
    finally:
        device.close()
    return [transitions, cycle]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.capture_cycle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=lifecore.available_backends()[0],
                        help=f"{', '.join(lifecore.backend_names())} or auto (default: the first available)")
    parser.add_argument("--graphs", default="auto", choices=["auto", "hardware", "software"])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    try:
        runs = capture_cycle_vs_model(lambda: lifecore.Device(args.backend, graphs=args.graphs),
                                      rounds=5 if args.quick else 15, warmup=1 if args.quick else 2)
    except lifecore.LifecoreError as error:
        print(f"capture_cycle: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    print("\n".join(format_run(run) for run in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
