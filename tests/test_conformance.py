"""The backend conformance suite (lifecore.testing.conformance) over every registered backend."""

from __future__ import annotations

import pytest

import lifecore
from lifecore.testing import emulated_backend
from lifecore.testing.conformance import BackendConformance

pytest_plugins = ["pytester"]


class TestConformance(BackendConformance):
    @pytest.fixture(name="backend")
    def _backend(self, backend_name: str) -> str:
        return backend_name


def test_a_subclass_binds_by_its_backend_attribute(pytester: pytest.Pytester) -> None:
    """The documented way to bind the suite: a passing run where the backend is, and an unbound
    subclass is an error naming the fix rather than a silent pass."""
    name = lifecore.available_backends()[0]
    pytester.makepyfile(test_bound=f"""
        from lifecore.testing.conformance import BackendConformance

        class TestBound(BackendConformance):
            backend = {name!r}
            graph_kinds = ("hardware",)

        class TestUnbound(BackendConformance):
            pass
    """)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "TestBound and not fault")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 15 and not outcomes.get("failed") and not outcomes.get("errors"), outcomes
    assert outcomes.get("skipped", 0) > 0, outcomes  # its software-graph half, which it opted out of
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "TestUnbound and reports")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*set the class attribute 'backend'*"])


def test_a_misspelled_graph_kind_is_an_error_not_a_vacuous_pass(pytester: pytest.Pytester) -> None:
    # Before: graph_kinds = ("Hardware", "sofware") skipped every test, and the run passed.
    pytester.makepyfile(test_typo=f"""
        from lifecore.testing.conformance import BackendConformance

        class TestTypo(BackendConformance):
            backend = {emulated_backend()!r}
            graph_kinds = ("Hardware", "sofware")
    """)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "round_trip or reports")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) > 0 and not outcomes.get("passed"), outcomes
    result.stdout.fnmatch_lines(["*graph_kinds must name 'hardware' and/or 'software'*"])


def test_a_fault_the_cycle_never_reaches_is_a_skip_and_one_it_reaches_is_checked() -> None:
    # Before: the fault test wrapped the cycle in try/except and passed whether or not the fault
    # fired (65 of 96 on the mock never did).
    with lifecore.Device(emulated_backend(), graphs="software") as device:
        stream = device.stream()
        before = {op: device.driver_calls(op) for op in ("stream_end_capture", "launch_kernel")}
        BackendConformance.run_cycle(stream)
        assert device.driver_calls("launch_kernel") > before["launch_kernel"]  # software graphs launch
        assert device.driver_calls("stream_end_capture") == before["stream_end_capture"]  # and never capture
        with pytest.raises(lifecore.InvalidArgumentError, match="unknown driver call 'nope'"):
            device.driver_calls("nope")


def test_offers_fault_injection_names_a_wrong_argument() -> None:
    from lifecore.testing import offers_fault_injection

    with pytest.raises(lifecore.LifecoreTypeError, match="offers_fault_injection: argument 'device' must be a lifecore"):
        offers_fault_injection(object())
    with lifecore.Device(emulated_backend()) as device:
        assert offers_fault_injection(device)


@pytest.mark.parametrize("graphs, least", [("hardware", 31), ("software", 23)])
def test_the_cycle_reaches_the_operations_the_backend_guide_counts(graphs: str, least: int) -> None:
    # Before: 24 and 16, so most of the fault tests skipped for an operation never called.
    with lifecore.Device(emulated_backend(), graphs=graphs) as dev:
        stream = dev.stream()
        before = {op: dev.driver_calls(op) for op in lifecore.driver_operations()}
        BackendConformance.run_cycle(stream)
        reached = [op for op in before if dev.driver_calls(op) != before[op]]
    assert len(reached) >= least, sorted(set(before) - set(reached))
    assert {"stream_create", "stream_query", "map_host", "host_view", "mem_free"} <= set(reached)
