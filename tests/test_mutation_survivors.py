"""Rules of the C++ core that an independent mutation sample found unpinned, each tested from outside.

The CUDA backend's cases are its own test, test_backend_cuda_fake.py.
"""

from __future__ import annotations

from lifecore.capture import CaptureDiscovery, CaptureSelection, CaptureTransform
from lifecore.testing.capture_session import sample_discovery

import capture_builders


def test_the_checkpoint_storage_estimate_counts_the_plan_and_the_artifact_identity() -> None:
    # The estimate covers what a checkpoint keeps: the artifact identity and the admitted plan's
    # encoding (which grows with a selection's id), not only fixed-size parts and hashes.
    def estimate(selection_id: str, artifact: str) -> int:
        sample = sample_discovery()
        discovery = CaptureDiscovery(artifact, [sample.point("blocks.0.mlp")])
        selection = CaptureSelection(selection_id, "blocks.0.mlp", CaptureTransform.summary())
        session = capture_builders.session_for(selection, discovery=discovery)
        size = session.checkpoint_storage_bytes(discovery)
        assert isinstance(size, int) and size > 0
        return size

    short = estimate("s", "m")
    assert estimate("s" * 1001, "m") - short >= 1000  # the plan's encoding holds the id
    assert estimate("s", "m" * 1001) - short >= 1000  # the artifact identity is kept
