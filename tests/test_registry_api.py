"""The backend registry as Python sees it: lifecore.backends() and the helpers that read it."""

from __future__ import annotations

import pytest

import lifecore


def test_the_helpers_agree_with_the_registry():
    infos = lifecore.backends()
    assert lifecore.backend_names() == [info.name for info in infos]
    assert lifecore.available_backends() == [info.name for info in infos if info.available]
    for info in infos:
        found = lifecore.backend_info(info.name)
        assert (found.name, found.available, found.reason) == (info.name, info.available, info.reason)


def test_every_available_backend_opens_a_device(backend_name):
    assert backend_name in lifecore.available_backends()
    with lifecore.Device(backend_name) as device:
        assert device.backend == backend_name


def test_every_unavailable_backend_refuses_with_its_reason():
    missing = [info for info in lifecore.backends() if not info.available]
    if not missing:
        pytest.skip("every registered backend is available on this machine")
    for info in missing:
        with pytest.raises(lifecore.BackendUnavailableError) as refused:
            lifecore.Device(info.name)
        assert info.name in str(refused.value)


def test_auto_opens_one_of_the_available_backends():
    with lifecore.Device("auto") as device:
        assert device.backend in lifecore.available_backends()


def test_an_unknown_name_lists_the_registered_backends():
    with pytest.raises(lifecore.InvalidArgumentError) as unknown:
        lifecore.backend_info("nonesuch")
    with pytest.raises(lifecore.InvalidArgumentError) as refused:
        lifecore.Device("nonesuch")
    for name in lifecore.backend_names():
        assert repr(name) in str(unknown.value) and repr(name) in str(refused.value)


def test_a_name_that_is_not_a_string_is_a_type_error():
    with pytest.raises(lifecore.LifecoreTypeError, match="str"):
        lifecore.backend_info(0)  # type: ignore[arg-type]


def test_the_helpers_are_public():
    for name in ("backends", "backend_names", "available_backends", "backend_info"):
        assert name in lifecore.__all__ and callable(getattr(lifecore, name))
        assert getattr(lifecore, name).__doc__


def test_the_emulated_backend_is_the_first_emulated_entry_and_offers_the_test_hooks():
    from lifecore.testing import emulated_backend, offers_fault_injection

    emulated = [info.name for info in lifecore.backends() if info.emulated]
    assert emulated, "no registered backend is emulated"
    name = emulated_backend()
    assert name == emulated[0] and lifecore.backend_info(name).emulated
    assert name in lifecore.available_backends()
    with lifecore.Device(name) as device:
        assert device.backend == name and offers_fault_injection(device)


def test_emulated_is_a_plain_fact_of_every_backend():
    for info in lifecore.backends():
        assert isinstance(info.emulated, bool)
        assert lifecore.backend_info(info.name).emulated is info.emulated


def test_no_emulated_backend_is_a_clear_error(monkeypatch):
    from lifecore.testing import emulated

    real = [info for info in lifecore.backends() if not info.emulated]
    monkeypatch.setattr(emulated, "backends", lambda: real)
    with pytest.raises(lifecore.BackendUnavailableError, match="no registered backend is an emulated device") as none:
        emulated.emulated_backend()
    for info in real:
        assert repr(info.name) in str(none.value)
