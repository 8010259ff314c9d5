"""The backend conformance suite (lifecore.testing.conformance) over every registered backend."""

from __future__ import annotations

import pytest

import lifecore
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
