"""A torch tensor lifecore writes into is marked written, as torch's own in-place operations mark
it (its version counter): a tensor an earlier operation saved for its backward pass then makes
that backward fail loudly, where before it silently gave gradients of the values written since.
A refused call writes nothing and marks nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lifecore
from lifecore import InvalidArgumentError
from lifecore.sequence import AdmissionCoordinator

from backend_roles import EMULATED

torch = pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.no_sanitizer  # torch does not load with the ASan runtime preloaded


def version(t: Any) -> int:
    return int(t._version)


def test_read_into_a_saved_tensor_fails_its_backward() -> None:
    with lifecore.Device(EMULATED) as device:
        stream = device.stream()
        b = stream.alloc(16)
        stream.write(b, np.full(4, 3.0, dtype=np.float32))
        x = torch.ones(4)
        w = torch.ones(4, requires_grad=True)
        y = (x * w).sum()  # saves x for w's gradient
        before = version(x)
        stream.read_into(b, x)
        assert x.tolist() == [3.0] * 4
        assert version(x) > before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_copy_and_fill_mark_a_torch_destination() -> None:
    with lifecore.Device(EMULATED) as device:
        stream = device.stream()
        b = stream.alloc(16)
        stream.fill(b, 7)
        t = torch.zeros(4, dtype=torch.int32)
        before = version(t)
        stream.copy(t, b)
        stream.sync()
        assert t.tolist() == [7] * 4
        after_copy = version(t)
        assert after_copy > before
        stream.fill(t, 9)
        stream.sync()
        assert t.tolist() == [9] * 4
        assert version(t) > after_copy
        # A torch source is read, not written: its counter stays.
        src = torch.arange(4, dtype=torch.int32)
        src_before = version(src)
        stream.copy(b, src)
        assert version(src) == src_before


def test_a_refused_write_marks_nothing() -> None:
    with lifecore.Device(EMULATED) as device:
        stream = device.stream()
        b = stream.alloc(16)
        t = torch.zeros(8)  # 32 bytes for a 16-byte buffer
        before = version(t)
        with pytest.raises(InvalidArgumentError):
            stream.read_into(b, t)
        assert version(t) == before
        assert not t.any()


def _coordinator() -> AdmissionCoordinator:
    return AdmissionCoordinator(domains={"kv": 64 * 16}, page_bytes=16, tokens_per_page=4, max_active_sequences=4)


def test_block_table_and_decode_table_mark_a_torch_table() -> None:
    c = _coordinator()
    adm = c.admit("r", 5, 16)  # 2 pages of 4 tokens, up to 4
    session = adm.resources.open_session()
    adm.resources.close()
    table = torch.zeros((2, 4), dtype=torch.int32)
    before = version(table)
    c.block_table([session], 4, out=table[:1])
    assert version(table) > before
    assert table[0, :2].tolist() == session.backing.block_ids().tolist()

    dt_out = torch.zeros((2, 4), dtype=torch.int32)
    decode = c.decode_table(2, 4, out=dt_out)
    created = version(dt_out)
    decode.update([session])
    updated = version(dt_out)
    assert updated > created
    decode.update([session])  # nothing changed: nothing written, nothing marked
    assert decode.last_written == 0 and version(dt_out) == updated
    decode.step([session], np.array([6]))
    assert version(dt_out) == updated  # 2 pages already cover 6 tokens: nothing written
    decode.step([session], np.array([9]))  # a third page
    stepped = version(dt_out)
    assert decode.last_written != 0 and stepped > updated
    session.close()
