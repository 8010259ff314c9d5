"""Bounded activation capture on numpy arrays: a summary and the top logits of one step."""

from __future__ import annotations

import numpy as np

from lifecore.capture import (Axis, CaptureDiscovery, CapturePhase, CapturePlan, CaptureRequest,
                              CaptureSelection, CaptureSession, CaptureTransform, NumpyBackend,
                              ObservationPoint, unlimited)


def main() -> None:
    discovery = CaptureDiscovery("tiny-model", [
        ObservationPoint("mlp", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 4)]),
        ObservationPoint("logits", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("vocab", 8)],
                         meaning="logits"),
    ])
    plan = CapturePlan([CaptureSelection("mlp", "mlp", CaptureTransform.summary()),
                        CaptureSelection("top", "logits", CaptureTransform.top_candidates(2))], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(batch=1, prompt_tokens=3, max_predictions=1)))
    backend = NumpyBackend()
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, "mlp", np.arange(12, dtype=np.float32).reshape(1, 3, 4))
    logits = np.zeros((1, 3, 8), dtype=np.float32)
    logits[0, -1, [2, 5]] = [1.0, 3.0]
    session.observe(backend, "logits", logits)
    step = session.take_step()
    assert step is not None
    summary, top = step.records
    assert summary.payload is not None and top.payload is not None and top.payload.candidates is not None
    print(summary.payload.mean, top.payload.candidates.ids)   # 5.5 [5 2]
    assert summary.payload.mean == 5.5 and top.payload.candidates.ids.tolist() == [5, 2]


if __name__ == "__main__":
    main()
