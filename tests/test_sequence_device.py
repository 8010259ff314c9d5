"""Pages from a device through the vendor layer (skipped where no such backend runs)."""

from __future__ import annotations

import pytest

from lifecore.errors import BackendUnavailableError, LifecoreTypeError
from lifecore.sequence import AdmissionCoordinator, Admitted

PAGE = 4096


@pytest.mark.parametrize("backend", ["mock", "cuda", "hip"])
def test_pages_come_from_the_device(backend):
    try:
        c = AdmissionCoordinator(backend, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=2)
    except BackendUnavailableError as error:
        pytest.skip(f"{backend} backend unavailable: {error}")
    assert c.page_memory_kind == "driver"
    adm = c.admit("r", 32, 64)
    assert isinstance(adm, Admitted)
    extents = adm.resources.initial_backing.extents
    assert extents and all(address != 0 and size == 2 * PAGE for _, _, _, address, size in extents)
    s = adm.resources.open_session()
    assert s.try_ensure_backing_covers(64).snapshot.pages == 4
    s.close()
    adm.resources.close()
    assert c.capacity().used_bytes == {"kv": 0}


class _NotADevice:
    def _driver_capsule(self):
        return object()


def test_device_without_a_driver_capsule_is_refused():
    with pytest.raises(LifecoreTypeError, match="capsule"):
        AdmissionCoordinator(_NotADevice(), domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=1)
