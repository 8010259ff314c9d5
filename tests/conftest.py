import enum
import faulthandler
import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, settings

import lifecore

from backend_roles import EMULATED, unavailable

# dev: quick enough for a laptop loop; ci: derandomized, more steps, no example database;
# ci-sanitize: dev's sizes, derandomized (the slow instrumented build in CI); gpu-check (below);
# nightly: long runs. Pick one with HYPOTHESIS_PROFILE or --hypothesis-profile.
settings.register_profile(
    "dev", max_examples=15, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci", max_examples=60, stateful_step_count=60, deadline=None, derandomize=True, database=None,
    print_blob=True, suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci-sanitize", max_examples=15, stateful_step_count=30, deadline=None, derandomize=True,
    database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow],
)
# gpu-check: ci-sanitize without shrinking, for a run under a hard time limit
# (tools/gpu_check.sh): a failure is reported as found rather than cut off while it shrinks.
settings.register_profile(
    "gpu-check", parent=settings.get_profile("ci-sanitize"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
settings.register_profile(
    "nightly", max_examples=1000, stateful_step_count=100, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "").strip() or "dev")  # set but empty: the default

# Every test has a time limit, so a deadlock is a fast, readable failure rather than a hung
# run: on expiry faulthandler prints the traceback of every thread and ends the process.
# LIFECORE_TEST_TIMEOUT overrides it (seconds); the sanitizer build is several times slower.
_TEST_TIME_LIMIT = float(
    os.environ.get("LIFECORE_TEST_TIMEOUT", "900" if os.environ.get("LIFECORE_SANITIZED") else "180")
)


# Where that traceback goes: the run's own stderr. pytest captures file descriptor 2 around
# each test, and a traceback written there is lost when the process ends, so CI would show a
# run that stopped without a word; a duplicate of the real stderr, taken while capture is
# suspended, reaches the log.
_TRACEBACK_STREAM = None


def pytest_configure(config):
    global _TRACEBACK_STREAM
    # pytest has suspended its capture by now and resumes it around each collection and test
    # itself: resuming it here started it early, and its terminal then wrote to the capture's
    # file, which is closed at exit, so a collection error ended in "I/O operation on closed
    # file" instead of its report. Suspending again is a no-op if it already is.
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=False)
    _TRACEBACK_STREAM = os.fdopen(os.dup(2), "w")


def pytest_unconfigure(config):
    global _TRACEBACK_STREAM
    if _TRACEBACK_STREAM is not None:
        faulthandler.cancel_dump_traceback_later()
        _TRACEBACK_STREAM.close()
        _TRACEBACK_STREAM = None


@pytest.fixture(autouse=True)
def _time_limit(request):
    limit = request.node.get_closest_marker("time_limit")
    seconds = float(limit.args[0]) if limit else _TEST_TIME_LIMIT
    faulthandler.dump_traceback_later(seconds, exit=True, file=_TRACEBACK_STREAM or sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _holds_a_native_object(value, depth: int = 0) -> bool:
    """Whether a parameter is, or holds in a list, tuple, set or dict, an instance of a class of
    the C++ core (its enums aside: they are Python enums, made once with the module)."""
    if type(type(value)).__module__ == "nanobind" and not isinstance(value, enum.Enum):
        return True
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_a_native_object(item, depth + 1) for item in value)
    if depth < 3 and isinstance(value, dict):
        return any(_holds_a_native_object(item, depth + 1) for item in value.values())
    return False


@pytest.fixture(autouse=True)
def _no_native_parameter(request):
    """A parameter is made when its module is collected and held by the collected test until the
    process ends, and past the interpreter's exit where another library keeps pytest's collection
    alive (seen with torch and hypothesis loaded together): a core object there is reported as a
    leak by LIFECORE_LEAK_WARNINGS=1. Such a parameter is made per test, by a function the test
    calls (see TENSOR_TRANSFORMS in test_capture_payloads.py)."""
    callspec = getattr(request.node, "callspec", None)
    held = sorted(name for name, value in (callspec.params.items() if callspec else ())
                  if _holds_a_native_object(value))
    if held:
        pytest.fail(f"an object of lifecore's core made at collection, in parameter {', '.join(held)}: "
                    "make it in the test (pass a function that builds it)", pytrace=False)


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory):
    """The fake CUDA driver (tests/fake_driver/fake_libcuda.c), compiled once per run, or a skip
    saying why it cannot be."""
    from driver_scenarios import build_fake_library

    return build_fake_library(tmp_path_factory, "fake_libcuda.c", "fake CUDA driver")


def backend_params() -> list:
    """One pytest param per registered backend, in registry order, id = its name (the fixture
    skips an unavailable one with the registry's reason, so the same test runs where it is
    present, or fails it where LIFECORE_REQUIRE lists it)."""
    return [pytest.param(info.name, id=info.name) for info in lifecore.backends()]


@pytest.fixture(params=backend_params())
def backend_name(request) -> str:
    """The name of each registered backend (lifecore.backends()); skipped where unavailable,
    failed instead where LIFECORE_REQUIRE lists it (backend_roles.unavailable)."""
    info = next(b for b in lifecore.backends() if b.name == request.param)
    if not info.available:
        unavailable(info.name, info.reason or "unavailable")
    return request.param


@pytest.fixture(params=["hardware", "software"])
def mock_device(request):
    """An emulated device with hardware, then software graphs (it offers fault injection)."""
    with lifecore.Device(EMULATED, graphs=request.param) as dev:
        yield dev


@pytest.fixture
def mock_hardware_device():
    """An emulated device recording with hardware graphs."""
    with lifecore.Device(EMULATED, graphs="hardware") as dev:
        yield dev
