"""A graph retains exactly the memory its replays may read or write: what the recorded pass used.
What only the warmup used is held by priming until begin_capture and then goes back to the pool,
so it may be freed and reused once the capture has ended; the reference model says the same."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import kernels as K
from lifecore.models.stream_capture import DeviceModel, Ref

from backend_roles import EMULATED

N = 16  # float32 elements
A, B = 4 * N, 1024  # the warmup-only temporary and the recorded one: two slice sizes (exact fits round to 256)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_slice_only_the_warmup_used_is_not_retained_by_the_graph(graphs) -> None:
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        s, model = dev.stream(), DeviceModel(graphs)
        ms = model.new_stream()
        x, mx = s.alloc(A), model.alloc(ms, A)
        s.write(x, np.ones(N, np.float32).tobytes())
        model.write(ms, mx, [1.0] * N)

        def step(warmup: bool) -> tuple[int, int]:
            """The warmup uses a temporary of size A (and one of size B); the recorded pass only the
            one of size B. Returns the address and model id of the one of size A (warmup) or B
            (recording)."""
            r, mr = s.alloc(B), model.alloc(ms, B)
            s.launch(K.scale_f32, 1, N, [N, 2.0, x, r])
            model.launch(ms, "scale_f32", [N, 2.0, Ref(mx), Ref(mr)])
            kept = (r.ptr, mr)
            if warmup:
                t, mt = s.alloc(A), model.alloc(ms, A)
                s.launch(K.scale_f32, 1, N, [N, 3.0, x, t])
                model.launch(ms, "scale_f32", [N, 3.0, Ref(mx), Ref(mt)])
                kept = (t.ptr, mt)
                t.free()
                model.free(mt)
            s.launch(K.add_f32, 1, N, [N, x, r, x])
            model.launch(ms, "add_f32", [N, Ref(mx), Ref(mr), Ref(mx)])
            r.free()
            model.free(mr)
            return kept

        s.graph_prepare()
        model.graph_prepare(ms)
        t_ptr, mt = step(warmup=True)
        s.begin_capture()
        model.begin_capture(ms)
        _, mr = step(warmup=False)
        graph, gid = s.end_capture(), model.end_capture(ms)
        s.sync()
        model.sync(ms)

        t_slot, r_slot = model.buffers[mt].slot.id, model.buffers[mr].slot.id
        assert r_slot in model.graphs_by_id[gid].retained
        assert t_slot not in model.graphs_by_id[gid].retained
        assert model.retained_slots() == {r_slot}
        stats = dev.memory_stats()
        assert stats["slices_retained"] == len(model.retained_slots()) == 1, stats

        # The warmup-only memory is back in the pool: the next window's allocation of that size
        # takes it without asking the driver, and the graph's replays never write it.
        s.graph_prepare()
        model.graph_prepare(ms)
        driver_allocations = dev.memory_stats()["driver_allocations"]
        u, mu = s.alloc(A), model.alloc(ms, A)
        assert dev.memory_stats()["driver_allocations"] == driver_allocations and u.ptr == t_ptr
        s.write(u, np.full(N, 7.0, np.float32).tobytes())
        model.write(ms, mu, [7.0] * N)
        graph.replay()
        model.replay(gid, ms)
        s.abort_capture()
        model.abort_capture(ms)
        for buf, mid in ((u, mu), (x, mx)):
            np.testing.assert_array_equal(np.frombuffer(s.read(buf), np.float32),
                                          np.asarray(model.read(ms, mid), np.float32))
        np.testing.assert_array_equal(np.frombuffer(s.read(u), np.float32), np.full(N, 7.0, np.float32))
        graph.destroy()
        model.destroy(gid)
        s.sync()
        assert dev.memory_stats()["slices_retained"] == len(model.retained_slots()) == 0
