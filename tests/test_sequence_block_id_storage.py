"""What a review of the KV arena under threads found: a sequence's block-id storage, lent as a
read-only array, taken by lifecore's own host writers once torch made a writable view of it
(so a release gave back blocks another live sequence held), and host accounting's extents
naming addresses where the docs say 0."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from lifecore.errors import InvalidArgumentError
from lifecore.sequence import AdmissionCoordinator

torch = pytest.importorskip("torch", reason="torch is not installed")

PAGE = 4096


def coordinator(device=None) -> AdmissionCoordinator:
    return AdmissionCoordinator(device, domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                max_active_sequences=8)


def open_one(c, name, tokens=32):
    adm = c.admit(name, tokens, tokens)
    s = adm.resources.open_session()
    adm.resources.close()
    return s


def writable_view_of_ids(s):
    view = torch.from_dlpack(s.backing.block_ids())  # torch drops NumPy's read-only flag
    return view.view(1, -1)


def test_a_block_table_into_a_sequences_own_block_ids_is_refused():
    # It was written: a's ids became b's, a's release gave back blocks b held, and a later
    # admission then held them too.
    c = coordinator()
    a, b = open_one(c, "a"), open_one(c, "b")
    ids_a, ids_b = a.backing.block_ids().copy(), b.backing.block_ids().copy()
    out = writable_view_of_ids(a)
    with pytest.raises(InvalidArgumentError, match=r"block_table: argument 'out' is a sequence's block-id storage"):
        c.block_table([b], 2, out)
    with pytest.raises(InvalidArgumentError, match=r"argument 'out' is a sequence's block-id storage"):
        c.decode_table(1, 2, out, pad=-1)
    np.testing.assert_array_equal(a.backing.block_ids(), ids_a)  # nothing written
    a.close()
    d = open_one(c, "d")
    assert not set(d.backing.block_ids().tolist()) & set(ids_b.tolist())  # no id held twice
    # Any other int32 array of that shape still takes the table.
    table = np.zeros((1, 2), np.int32)
    c.block_table([b], 2, table)
    np.testing.assert_array_equal(table[0], ids_b)
    del out
    gc.collect()
    b.close()
    d.close()


def test_read_into_a_sequences_own_block_ids_is_refused():
    import lifecore
    from backend_roles import EMULATED

    c = coordinator()
    a = open_one(c, "a")
    ids = a.backing.block_ids().copy()
    with lifecore.Device(EMULATED) as dev:
        stream = dev.stream()
        buf = stream.alloc(8)
        stream.write(buf, np.array([77, 78], np.int32).tobytes())
        view = writable_view_of_ids(a).view(-1)
        for out in (view, np.from_dlpack(view)):  # through DLPack, and through the buffer protocol
            with pytest.raises(InvalidArgumentError, match=r"read_into: argument 'out' is a sequence's block-id"):
                stream.read_into(buf, out)
        np.testing.assert_array_equal(a.backing.block_ids(), ids)
        target = np.zeros(2, np.int32)
        stream.read_into(buf, target)
        assert target.tolist() == [77, 78]


def test_copy_fill_and_launch_never_write_a_sequences_block_ids():
    # On the emulated device a host tensor is mapped into its address space for the call: a
    # copy, fill or kernel into a view of a's ids wrote them.
    import lifecore
    from lifecore import kernels as K

    c = coordinator()
    a, b = open_one(c, "a"), open_one(c, "b")
    ids = a.backing.block_ids().copy()
    with lifecore.Device("mock") as dev:
        stream = dev.stream()
        src = stream.alloc(8)
        stream.write(src, b.backing.block_ids().tobytes())
        view = torch.from_dlpack(a.backing.block_ids())
        with pytest.raises(InvalidArgumentError, match="argument 'dst' is read-only"):
            stream.copy(view, src)
        with pytest.raises(InvalidArgumentError, match="argument 'buf' is read-only"):
            stream.fill(view, 99)
        with pytest.raises(InvalidArgumentError, match="argument 'out' is read-only"):
            stream.launch(K.scale_f32, 1, 2, [2, 1.0, torch.zeros(2), view.view(torch.float32)])
        stream.copy(src, view)  # read from: a copy out of the ids is fine
        stream.sync()
        np.testing.assert_array_equal(np.frombuffer(stream.read(src), np.int32), ids)
    np.testing.assert_array_equal(a.backing.block_ids(), ids)


def test_host_accounting_extents_name_no_address():
    c = coordinator()
    s = c.admit("a", 40, 48).resources.open_session()
    assert c.page_memory_kind == "host"
    assert s.backing.extents == [("kv", 0, 3, 0, 3 * PAGE)]
