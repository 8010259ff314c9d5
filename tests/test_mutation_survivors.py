"""Rules of the C++ core that an independent mutation sample found unpinned, each tested from outside.

The CUDA cases run against the fake CUDA driver (tests/fake_driver/fake_libcuda.c) in a fresh
interpreter per scenario, because a vendor library loads once per process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lifecore.capture import CaptureDiscovery, CaptureSelection, CaptureTransform
from lifecore.testing.capture_session import sample_discovery

import capture_builders
from driver_scenarios import build_fake_library, run_scenario


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    return build_fake_library(tmp_path_factory, "fake_libcuda.c", "fake CUDA driver")


def run_fake(library: Path, body: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment.update(env)
    environment["LIFECORE_LIBCUDA"] = str(library)
    return run_scenario(body, environment)


def test_a_failing_cudevice_get_fails_the_open_with_the_call_and_code(fake_libcuda) -> None:
    # The probe still sees a device (cuDeviceGetCount), so only opening it meets the failure.
    body = """
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    result["available"] = info.available
    try:
        lifecore.Device("cuda")
        result["open"] = "opened"
    except lifecore.DriverError as error:
        result["open"] = [error.code, error.call]
    """
    result = run_fake(fake_libcuda, body, FAKE_CUDA_DEVICE_GET="101")
    assert result["available"] is True
    assert result["open"] == [101, "cuDeviceGet"]


def test_every_profile_destroys_both_of_its_events(fake_libcuda) -> None:
    body = """
    import ctypes, os
    live = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"]).fake_cuda_live_events
    live.restype = ctypes.c_long
    device = lifecore.Device("cuda")
    s = device.stream()
    s.sync()
    before = live()
    with s.profile() as p:  # stopped by the with
        pass
    result["stopped"] = p.elapsed_ms is not None
    result["after_stop"] = live() - before
    try:
        with s.profile():
            raise KeyError("work failed")  # stopped on the way out
    except KeyError:
        pass
    result["after_exception"] = live() - before
    q = s.profile()
    result["while_live"] = live() - before
    del q  # never stopped: abandoned
    import gc; gc.collect()
    result["after_abandon"] = live() - before
    s.sync()
    device.close()
    """
    result = run_fake(fake_libcuda, body)
    assert result["stopped"] is True
    assert result["while_live"] == 2  # a start and an end event
    assert result["after_stop"] == 0
    assert result["after_exception"] == 0
    assert result["after_abandon"] == 0



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
