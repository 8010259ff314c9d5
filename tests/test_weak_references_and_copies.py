"""What an engine does with lifecore's handles besides calling them: weak references to the main
handles (a WeakKeyDictionary of per-stream workspaces, weakref.finalize), which do not keep them
alive; and copies of an Engine, which are refused (a copy would share its memory and close it)."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import pytest

import lifecore
from lifecore.errors import LifecoreTypeError
from lifecore.sequence import AdmissionCoordinator


def test_the_main_handles_take_weak_references_that_do_not_keep_them():
    device = lifecore.Device("mock")
    stream = device.stream()
    buffer = stream.alloc(16)
    graph = stream.capture(lambda s: s.fill(buffer, 1), warmup=0)
    coordinator = AdmissionCoordinator(domains={"kv": 4096}, page_bytes=4096, tokens_per_page=16,
                                       max_active_sequences=1)
    refs = {name: weakref.ref(obj) for name, obj in
            [("device", device), ("stream", stream), ("buffer", buffer), ("graph", graph), ("coordinator", coordinator)]}
    workspaces = weakref.WeakKeyDictionary({stream: "workspace"})
    finalized = []
    weakref.finalize(buffer, finalized.append, "buffer")
    assert all(ref() is not None for ref in refs.values()) and workspaces[stream] == "workspace"
    del graph, buffer, coordinator
    gc.collect()
    assert [name for name, ref in refs.items() if ref() is None] == ["buffer", "graph", "coordinator"]
    assert finalized == ["buffer"]
    del stream
    gc.collect()
    assert len(workspaces) == 0 and refs["stream"]() is None
    device.close()


def test_an_engine_refuses_to_be_copied_or_pickled():
    torch = pytest.importorskip("torch", reason="the reference engine needs torch")
    from lifecore.engine import Engine

    engine = Engine("tiny", dtype=torch.float64, num_blocks=24, max_batch=4)
    try:
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(LifecoreTypeError, match="^Engine cannot be copied or pickled"):
                attempt(engine)
        assert not engine.closed
    finally:
        engine.close()
