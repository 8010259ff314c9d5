"""Payloads as arrays (NumPy backend; no torch, so these also run under the sanitizers): tensor
payloads keep the source dtype and are charged their real bytes, small results are arrays
under names that say what they hold, payload.tensor and friends are values, JSON stays
bounded by what was charged, and the session prices a describing backend itself."""

from __future__ import annotations

import gc
import json
import re
import warnings

import numpy as np
import pytest

from lifecore.capture import (
    Axis,
    Candidates,
    CaptureDiscovery,
    CaptureOutcome,
    CapturePayload,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    Histogram,
    NumpyBackend,
    ObservationPoint,
    Summary,
    TransformKind,
    unlimited,
)
from lifecore.capture.backends import payload_cost
from lifecore.errors import CaptureSessionError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError

from capture_builders import session_for

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE
SHAPE = (2, 3, 4)
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_]


def discovery(shape=SHAPE, name: str = "p", meaning: str = "activation") -> CaptureDiscovery:
    return CaptureDiscovery("payloads", [ObservationPoint(name, [Axis(f"a{i}", n) for i, n in enumerate(shape)],
                                                          meaning=meaning)])


def capture(transform: CaptureTransform, value: np.ndarray, *, slices=(), backend=None):
    meaning = "logits" if transform.kind == TransformKind.TOP_CANDIDATES else "activation"
    session = session_for(CaptureSelection("s", "p", transform, slices=list(slices)),
                          discovery=discovery(value.shape, meaning=meaning), request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    session.observe(backend or NumpyBackend(), "p", value)
    return session.take_step().record("s")


def sample(dtype) -> np.ndarray:
    values = np.arange(np.prod(SHAPE)).reshape(SHAPE) - 7
    if np.issubdtype(dtype, np.unsignedinteger) or dtype == np.bool_:
        values = np.abs(values) % 2 if dtype == np.bool_ else np.abs(values)
    return values.astype(dtype)


# Built per test (a native object held by a parameter would outlive the module at exit).
TENSOR_TRANSFORMS = {
    "full_tensor": lambda: (CaptureTransform.full_tensor(), (), lambda x: x),
    "slice": lambda: (CaptureTransform.slice(), (CaptureSlice("a2", 1, 4, 2),), lambda x: x[:, :, 1:4:2]),
    "preview": lambda: (CaptureTransform.preview(5), (), lambda x: x.ravel()[:5]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(TENSOR_TRANSFORMS))
def test_tensor_payloads_keep_the_source_dtype_and_are_charged_their_real_bytes(dtype, name):
    transform, slices, expected = TENSOR_TRANSFORMS[name]()
    x = sample(dtype)
    record = capture(transform, x, slices=slices)
    want = expected(x)
    payload = record.payload
    assert record.outcome in (CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED)
    assert isinstance(payload.tensor, np.ndarray) and payload.tensor.dtype == x.dtype
    assert payload.tensor.shape == want.shape and np.array_equal(payload.tensor, want)
    assert payload.dtype == np.dtype(dtype).name and payload.shape == list(want.shape)
    # Retained bytes are the array's own bytes (the metadata envelope retains nothing).
    assert payload.nbytes == want.nbytes == np.dtype(dtype).itemsize * want.size
    assert record.charged.retained_bytes == want.nbytes
    encoded = record.to_json()
    assert len(encoded) <= record.charged.encoded_bytes
    decoded = json.loads(encoded)["payload"]
    assert decoded["dtype"] == payload.dtype and decoded["shape"] == list(want.shape)
    assert decoded["values"] == want.ravel().tolist()


@pytest.mark.parametrize("name", list(TENSOR_TRANSFORMS))
def test_values_in_a_non_native_byte_order_are_kept_in_native_order(name):
    transform, slices, expected = TENSOR_TRANSFORMS[name]()
    swapped = sample(np.float32).astype(np.dtype(np.float32).newbyteorder("S"))
    record = capture(transform, swapped, slices=slices)
    assert record.outcome in (CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED)
    kept = record.payload.tensor
    assert kept.dtype.isnative and kept.dtype == np.float32 and record.payload.dtype == "float32"
    np.testing.assert_array_equal(kept, expected(swapped))
    assert json.loads(record.to_json())["payload"]["values"] == expected(swapped).ravel().tolist()


def test_a_payload_is_a_read_only_copy_not_a_view_of_the_activation():
    x = np.ones(SHAPE, np.float32)
    payload = capture(CaptureTransform.full_tensor(), x).payload
    x[...] = 5  # the model reuses its buffer
    assert float(payload.tensor.max()) == 1.0
    with pytest.raises(ValueError):
        payload.tensor[0, 0, 0] = 2


def test_extreme_values_encode_within_the_charge():
    x = np.array([[[np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0]] * 3] * 2, dtype=np.int64)
    record = capture(CaptureTransform.full_tensor(), x)
    assert len(record.to_json()) <= record.charged.encoded_bytes
    assert json.loads(record.to_json())["payload"]["values"][:2] == [np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    y = np.full(SHAPE, -2.2250738585072014e-308, np.float64)
    y[0, 0, 0], y[0, 0, 1] = np.nan, -np.inf
    record = capture(CaptureTransform.full_tensor(), y)
    assert len(record.to_json()) <= record.charged.encoded_bytes
    assert json.loads(record.to_json())["payload"]["values"][:3] == ["NaN", "-Infinity", -2.2250738585072014e-308]
    h = capture(CaptureTransform.full_tensor(), np.full(SHAPE, 65504.0, np.float16))  # float16's largest
    assert json.loads(h.to_json())["payload"]["values"][0] == 65504.0


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_negative_zero_keeps_its_sign_in_json(dtype):
    """-0.0 was written "-0", which Python's json (as most readers) reads as the integer 0."""
    x = np.zeros(SHAPE, dtype)
    x[0, 0, 0] = -0.0
    record = capture(CaptureTransform.full_tensor(), x)
    values = json.loads(record.to_json())["payload"]["values"]
    assert np.signbit(values[0]) and values[0] == 0.0 and not np.signbit(values[1])
    assert len(record.to_json()) <= record.charged.encoded_bytes


def test_small_results_are_arrays_named_for_what_they_hold():
    x = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(SHAPE)
    summary = capture(CaptureTransform.summary(), x).payload
    assert isinstance(summary.summary, Summary) and summary.summary.count == 24 and summary.summary.nonfinite == 0
    assert summary.stats.dtype == np.float64 and summary.stats.tolist() == [summary.min, summary.max, summary.mean,
                                                                             summary.std]
    hist = capture(CaptureTransform.histogram([-1.0, 0.0, 1.0]), x).payload
    assert isinstance(hist.histogram, Histogram)
    assert hist.bin_edges.dtype == np.float64 and hist.bin_edges.tolist() == [-1.0, 0.0, 1.0]
    assert hist.counts.dtype == np.int64 and hist.counts.tolist() == [12, 12]
    top = capture(CaptureTransform.top_candidates(2), x).payload
    assert isinstance(top.candidates, Candidates)
    assert top.candidate_ids.dtype == np.int64 and top.candidate_ids.tolist() == [3, 2]
    assert top.scores.dtype == np.float64 and top.scores.tolist() == pytest.approx([1.0, x[1, 2, 2]])
    # Each value is None on a payload of another kind.
    assert summary.tensor is None and summary.histogram is None and summary.candidates is None
    assert hist.summary is None and hist.candidate_ids is None and top.bin_edges is None and top.stats is None


def test_on_the_class_the_names_stay_the_constructors():
    assert CapturePayload.summary(3, 0, 0.0, 1.0, 0.5, 0.1).summary == Summary(3, 0, 0.0, 1.0, 0.5, 0.1)
    legacy = CapturePayload.tensor([2, 2], [1.0, 2.0, 3.0, 4.0])
    assert legacy.tensor.dtype == np.float64 and legacy.tensor.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert legacy.dtype == "float64" and legacy.nbytes == 32
    assert CapturePayload.histogram([0.0, 1.0], [4]).histogram.counts.tolist() == [4]
    assert CapturePayload.candidates([7], [0.5]).candidates.ids.tolist() == [7]
    assert "<nanobind" not in repr(legacy.tensor) and "<nanobind" not in repr(legacy.summary)


def test_a_list_argument_is_read_from_a_snapshot():
    # An item's __index__ empties the list being read: the items given are still the ones read.
    counts = []

    class Emptying:
        def __index__(self):
            counts.clear()
            return 2

    counts.extend([Emptying(), 3, 4, 5])
    assert CapturePayload.histogram([0.0, 1.0, 2.0, 3.0, 4.0], counts).histogram.counts.tolist() == [2, 3, 4, 5]


def test_the_old_names_still_answer_with_a_deprecation_warning():
    top = CapturePayload.candidates([7, 1], [0.5, 0.25])
    with pytest.warns(DeprecationWarning, match="candidate_ids"):
        assert top.counts == [7, 1]
    with pytest.warns(DeprecationWarning, match="values is deprecated"):
        assert top.values == [0.5, 0.25]
    array = CapturePayload.from_array(np.array([1, 2], np.int16))
    with pytest.warns(DeprecationWarning):
        assert array.values == [1.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CapturePayload.histogram([0.0, 1.0], [4]).counts.tolist() == [4]  # the new meaning: no warning


@pytest.mark.parametrize("bad, error", [([1.0, 2.0], LifecoreTypeError), ("text", LifecoreTypeError),
                                        (np.zeros(3, np.complex64), InvalidArgumentError),
                                        (np.zeros((4, 4), np.float32)[:, ::2], LifecoreTypeError)],
                         ids=["list", "str", "complex", "strided"])
def test_from_array_refuses_what_it_cannot_keep(bad, error):
    with pytest.raises(error, match="from_array"):
        CapturePayload.from_array(bad)


def test_from_array_refuses_a_torch_tensor_read_negated():
    """torch's negative bit: the tensor reads its memory negated and exports that memory as it
    is, so [1.5, -2.0] read as [-1.5, 2.0] was kept as [1.5, -2.0]."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    negated = torch.tensor([1.5, -2.0])._neg_view()
    with pytest.raises(InvalidArgumentError, match="from_array.*negative bit set"):
        CapturePayload.from_array(negated)
    assert CapturePayload.from_array(negated.resolve_neg()).tensor.tolist() == [-1.5, 2.0]


@pytest.mark.parametrize("bad, named", [(np.zeros(3, np.longdouble), str(np.dtype(np.longdouble))),
                                        (np.zeros(3, object), "object"), (np.array(["a", "b"]), "<U1"),
                                        (np.zeros(2, "datetime64[s]"), "datetime64[s]"),
                                        (np.zeros(3, np.complex64), "complex64")],
                         ids=["longdouble", "object", "str", "datetime", "complex"])
def test_from_array_names_the_element_type_it_cannot_keep(bad, named):
    # Before: a contiguous NumPy array of a type DLPack cannot describe was refused as if it were
    # no array ("must be a contiguous host array ..., got ndarray").
    with pytest.raises(InvalidArgumentError, match=rf"^CapturePayload.from_array: argument 'array' holds "
                                                   rf"{re.escape(named)} elements, which a payload cannot keep "
                                                   rf"\(it keeps uint8, int8, .*, bool\)$"):
        CapturePayload.from_array(bad)


def test_a_numpy_backend_tensor_stays_read_only():
    # Before: the kept array owned its memory, so anyone could turn writing back on and change
    # the record (and its JSON) after the fact.
    record = capture(CaptureTransform.full_tensor(), sample(np.float32))
    kept, json_before = record.payload.tensor, record.to_json()
    with pytest.raises(ValueError, match="read-only"):
        kept[0, 0, 0] = 123
    array = kept  # nor any array below it: the memory at the bottom is an immutable bytes object
    while isinstance(array, np.ndarray):
        with pytest.raises(ValueError, match="WRITEABLE"):
            array.flags.writeable = True
        array = array.base
    assert isinstance(array, bytes) and len(array) == kept.nbytes  # charged and kept: the same bytes
    assert record.to_json() == json_before and np.array_equal(record.payload.tensor, sample(np.float32))
    swapped = capture(CaptureTransform.full_tensor(), sample(np.float32).astype(">f4")).payload.tensor
    assert swapped.dtype == np.float32 and np.array_equal(swapped, sample(np.float32))  # kept in native order
    with pytest.raises(InvalidArgumentError, match=r"holds >f4 elements, in the byte order this machine does not use"):
        CapturePayload.from_array(sample(np.float32).astype(">f4"))


@pytest.mark.parametrize("value", [np.array([["1", "2", "3", "4"]] * 6).reshape(SHAPE),
                                   np.zeros(SHAPE, "datetime64[s]"), np.zeros(SHAPE, "timedelta64[s]")],
                         ids=["str", "datetime", "timedelta"])
@pytest.mark.parametrize("transform", [CaptureTransform.summary, lambda: CaptureTransform.histogram([0.0, 8.0, 64.0]),
                                       lambda: CaptureTransform.top_candidates(2)], ids=["summary", "histogram", "top"])
def test_values_that_are_not_numbers_are_refused_not_read_as_numbers(value, transform):
    # Before: strings were summarized as the numbers they spell, datetimes as counts of seconds.
    with pytest.raises(CaptureSessionError, match="is not a .* of numbers; observe bool, integer or floating") as caught:
        capture(transform(), value)
    assert isinstance(caught.value.__cause__, InvalidArgumentError)


@pytest.mark.parametrize("transform", [CaptureTransform.summary, lambda: CaptureTransform.histogram([0.0, 8.0, 64.0]),
                                       lambda: CaptureTransform.top_candidates(2)], ids=["summary", "histogram", "top"])
def test_complex_values_are_refused_not_reduced_to_their_real_part(transform):
    """A tensor payload refuses complex values; a summary, histogram or top candidates cast them
    to float64, dropping the imaginary part under a ComplexWarning, and recorded CAPTURED."""
    value = (np.arange(np.prod(SHAPE)).reshape(SHAPE) * (1 + 2j)).astype(np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CaptureSessionError, match="complex") as caught:
            capture(transform(), value)
    assert isinstance(caught.value.__cause__, InvalidArgumentError)


def test_a_view_of_a_larger_buffer_is_kept_as_a_copy_of_its_own_bytes():
    big = np.arange(1_000_000, dtype=np.float64)
    big.flags.writeable = False
    payload = CapturePayload.from_array(big[2:4])
    assert payload.nbytes == 16 and not np.shares_memory(payload.tensor, big) and payload.tensor.tolist() == [2.0, 3.0]
    assert not payload.tensor.flags.writeable  # a read-only view stays read-only, for good
    with pytest.raises(ValueError, match="WRITEABLE"):
        payload.tensor.flags.writeable = True
    # Memory NumPy does not own has a size it cannot tell: copied too; bytes of the array's own
    # size are kept as given (immutable), more bytes are copied.
    assert CapturePayload.from_array(np.frombuffer(bytearray(64), np.float64)).tensor.base is None
    exact = np.frombuffer(bytes(64), np.float64)
    assert CapturePayload.from_array(exact).tensor is exact
    part = np.frombuffer(bytes(128), np.float64)[:8]
    copied = CapturePayload.from_array(part).tensor
    assert not np.shares_memory(copied, part) and not copied.flags.writeable
    while isinstance(copied, np.ndarray):  # read-only as the array was: over bytes of its own size
        copied = copied.base
    assert isinstance(copied, bytes) and len(copied) == 64
    # A view of exactly its own buffer is kept as given.
    whole = np.zeros((2, 2))
    flat = whole.reshape(-1)
    assert CapturePayload.from_array(flat).tensor is flat


class BigView(NumpyBackend):
    """Answers a full tensor with a view of a buffer far larger than the region."""

    big = np.zeros(1_000_000)

    def transform(self, tensor, request):
        return CapturePayload.from_array(self.big[: int(np.prod(request.selected_shape))])


def test_a_backends_view_of_a_larger_buffer_keeps_only_what_was_charged():
    record = capture(CaptureTransform.full_tensor(), np.zeros(2), backend=BigView())
    assert record.outcome == CaptureOutcome.CAPTURED
    assert record.payload.tensor.base is None and record.payload.nbytes == record.charged.retained_bytes == 16


def test_top_candidates_of_logits_with_no_rows_are_refused_before_any_charge():
    session = session_for(CaptureSelection("top", "p", CaptureTransform.top_candidates(2)),
                          discovery=discovery((1, 0, 3), meaning="logits"), request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    envelopes = session.cumulative_usage()
    with pytest.raises(InvalidArgumentError, match="logits with no rows"):
        session.observe(NumpyBackend(), "p", np.zeros((1, 0, 3), np.float32))
    assert session.cumulative_usage() == envelopes
    record = session.take_step().record("top")
    assert (record.outcome, record.fail_reason) == (CaptureOutcome.FAILED, "invalid")


class OverKeeping(NumpyBackend):
    """Charges float32 but keeps float64: more than the ledger granted."""

    def describe(self, tensor):
        return tensor.shape, 4, True

    def transform(self, tensor, request):
        return CapturePayload.from_array(np.zeros(request.selected_shape, np.float64))


def test_a_payload_larger_than_its_charge_fails_the_capture():
    # Its element size is not the source's: refused as that, before the ledger is asked.
    with pytest.raises(CaptureSessionError, match=r"a tensor of float64 \(8 bytes per element\) for a source of 4"):
        capture(CaptureTransform.full_tensor(), np.zeros(SHAPE, np.float32), backend=OverKeeping())


def test_a_describing_backend_is_priced_by_the_core_cost_model():
    x = np.zeros(SHAPE, np.float16)
    record = capture(CaptureTransform.slice(), x, slices=[CaptureSlice("a0", 0, 1)])
    cost = payload_cost(TransformKind.SLICE, [1, 3, 4], 2)
    assert cost == CaptureUsage(1, 24, 24, 128 + 25 * 12 + 21 * 3)
    assert record.charged.retained_bytes == cost.retained_bytes
    summary = capture(CaptureTransform.summary(), x)
    assert summary.charged.retained_bytes == 48  # 6 numbers x 8 bytes


class Counting(NumpyBackend):
    def __init__(self):
        self.described = 0
        self.requests = []

    def describe(self, tensor):
        self.described += 1
        return super().describe(tensor)

    def transform(self, tensor, request):
        self.requests.append(request)
        return super().transform(tensor, request)


def test_a_points_request_is_reused_while_its_facts_hold_and_rechecked_when_they_change():
    disc = CaptureDiscovery("payloads", [ObservationPoint("p", [Axis("rows", None), Axis("d", 4)])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.slice(), slices=[CaptureSlice("d", 0, 2)])],
                       unlimited())
    session = CaptureSession(plan.admit(disc, CaptureRequest(1, 1, 5)))
    backend = Counting()
    observer = session.observer("p", backend)
    shapes = [(3, 4), (3, 4), (3, 4), (5, 4), (5, 3)]
    records = []
    for prediction, shape in enumerate(shapes):
        session.begin_step(PREFILL if prediction == 0 else DECODE, prediction)
        try:
            observer.observe(np.ones(shape, np.float32))
        except InvalidArgumentError:
            pass
        records.append(session.take_step().record("s"))
    assert [r.selected_shape for r in records[:4]] == [[3, 2], [3, 2], [3, 2], [5, 2]]
    assert records[4].outcome == CaptureOutcome.FAILED and "extent 3" in records[4].message  # never a stale check
    assert backend.described == 5 and len(backend.requests) == 4
    # The same facts reuse the converted request (this point's extents do not depend on the
    # phase); new facts give a new one.
    assert backend.requests[0] is backend.requests[1] is backend.requests[2]
    assert backend.requests[3] is not backend.requests[2]


def test_an_observer_keeps_no_backend_exception_after_the_call():
    """The backend's exception becomes the __cause__ of the error the observer raises, and the
    observer lets go of it then. Kept, its traceback's frames (a torch hook's, holding the block
    that holds this observer) made a cycle through the core that the collector cannot see, and
    the session, its records and the observer lived until the process ended."""
    freed = []

    class BackendFailure(Exception):
        def __del__(self):
            freed.append(True)

    class Failing(NumpyBackend):
        def transform(self, tensor, request):
            raise BackendFailure("the backend failed")

        def summary_statistics(self, tensor, request):
            raise BackendFailure("the backend failed")

    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    observer = session.observer("p", Failing())
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError) as raised:
        observer.observe(np.ones(SHAPE, np.float32))
    assert isinstance(raised.value.__cause__, BackendFailure)
    del raised
    gc.collect()
    assert freed == [True]  # only the raised error held it
    assert session.take_step().record("s").outcome == CaptureOutcome.FAILED


def test_an_observer_matches_observe_and_is_a_forward_hook():
    x = np.arange(24, dtype=np.float32).reshape(SHAPE)
    via_observe = capture(CaptureTransform.summary(), x).payload.summary
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    observer = session.observer("p", NumpyBackend(), tensor_type=np.ndarray, select=lambda out: out[1])
    assert observer.path == "p" and observer.selected
    with pytest.raises(CaptureSessionError, match="^observe at p: no capture step is open"):
        observer.observe(x)
    session.begin_step(PREFILL, 0)
    observer(None, (), ("ignored", x))  # hook(module, args, output): the selector picks element 1
    assert session.take_step().record("s").payload.summary == via_observe
    session.begin_step(DECODE, 1)
    observer(None, (), x)  # a plain output of the tensor type is observed as is
    assert session.take_step().record("s").outcome == CaptureOutcome.CAPTURED
    idle = session.observer("elsewhere", NumpyBackend())
    assert not idle.selected
    session.begin_step(DECODE, 2)
    idle.observe(x)  # nothing selected there: nothing happens
    assert session.take_step().record("s").outcome == CaptureOutcome.MISSING


def test_an_observer_called_as_a_hook_takes_module_args_output_by_position_or_name():
    x = np.arange(24, dtype=np.float32).reshape(SHAPE)
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    observer = session.observer("p", NumpyBackend())
    session.begin_step(PREFILL, 0)
    bad_calls = [((None, ()), {}, "missing argument 'output'"),
                 ((None, (), x, 4), {}, "takes 3 arguments .* got 4 positional"),
                 ((None, (), x), {"output": x}, "argument 'output' given twice"),
                 ((None, ()), {"result": x}, "unexpected keyword argument 'result'"),
                 ((), {}, "missing argument 'module'")]
    for args, kwargs, message in bad_calls:
        with pytest.raises(LifecoreTypeError, match="^CaptureObserver.__call__: " + message):
            observer(*args, **kwargs)
    # A refused call observed nothing: the step still has the point to capture.
    observer(output=x, module=None, args=())
    step = session.take_step()
    assert step.record("s").outcome == CaptureOutcome.CAPTURED
    assert step.record("s").payload.summary.count == x.size


def test_what_is_no_backend_is_refused_before_the_point_is_looked_at():
    x = np.arange(24, dtype=np.float32).reshape(SHAPE)
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    for call, name in ((lambda b: session.observe(b, "p", x), "CaptureSession.observe"),
                       (lambda b: session.observer("p", b), "CaptureSession.observer"),
                       (lambda b: session.intervene(b, "p", x), "CaptureSession.intervene")):
        for wrong in (object(), 3, "numpy"):
            with pytest.raises(LifecoreTypeError, match=f"^{name}: argument 'backend' must be a capture backend"):
                call(wrong)
    # The class where an instance is meant: its transform is a function, yet no backend.
    with pytest.raises(LifecoreTypeError, match="got the class NumpyBackend itself: pass an instance"):
        session.observe(NumpyBackend, "p", x)
    # An instance carrying its own transform is checked each call: another of its type is not
    # let through for the first one's sake.
    import types

    carried = types.SimpleNamespace(transform=lambda tensor, request: None)
    with pytest.raises(CaptureSessionError):  # a backend, if a poor one: its capture fails
        session.observer("p", carried).observe(x)
    session.take_step()
    session.begin_step(DECODE, 1)
    with pytest.raises(LifecoreTypeError, match="got SimpleNamespace"):
        session.observe(types.SimpleNamespace(), "p", x)
    session.observe(NumpyBackend(), "p", x)  # the point was not used up by the refusals
    step = session.take_step()
    assert step.record("s").outcome == CaptureOutcome.CAPTURED and session.checkpoint_ready


@pytest.mark.parametrize("kwargs, error", [(dict(path=3, backend=NumpyBackend()), LifecoreTypeError),
                                           (dict(path="p", backend=None), InvalidArgumentError),
                                           (dict(path="p", backend=NumpyBackend(), tensor_type=3), LifecoreTypeError),
                                           (dict(path="p", backend=NumpyBackend(), select=3), LifecoreTypeError)])
def test_observer_arguments_are_checked(kwargs, error):
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    with pytest.raises(error, match="CaptureSession.observer"):
        session.observer(**kwargs)


def test_a_cached_request_never_hides_a_phase_or_prediction_check():
    disc = CaptureDiscovery("payloads", [
        ObservationPoint("seq", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 2)]),
        ObservationPoint("ctx", [Axis("batch", "batch"), Axis("ctx", "context")])])
    plan = CapturePlan([CaptureSelection("s", "seq", CaptureTransform.summary()),
                        CaptureSelection("c", "ctx", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(disc, CaptureRequest(1, 3, 3)))
    seq, ctx = session.observer("seq", NumpyBackend()), session.observer("ctx", NumpyBackend())
    session.begin_step(PREFILL, 0)
    seq.observe(np.ones((1, 3, 2)))
    ctx.observe(np.ones((1, 3)))
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.CAPTURED] * 2
    session.begin_step(DECODE, 1)  # the same shapes again: decode expects one token and context 4
    for observer, value in ((seq, np.ones((1, 3, 2))), (ctx, np.ones((1, 3)))):
        with pytest.raises(InvalidArgumentError, match="expected"):
            observer.observe(value)
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.FAILED] * 2


class ShortForm(NumpyBackend):
    """A backend answering summaries through the optional short form, with a chosen answer."""

    def __init__(self, answer=None):
        self.answer = answer
        self.asked = 0

    def summary_statistics(self, tensor, request):
        self.asked += 1
        if self.answer is not None:
            return self.answer
        region = np.asarray(tensor if request.whole else tensor[request.index], dtype=np.float64)
        return [float(region.min()), float(region.max()), float(region.mean()), float(region.std())]


def test_a_summary_in_the_short_form_gets_the_regions_count_from_the_session():
    value = sample(np.float32)
    whole = capture(CaptureTransform.summary(), value, backend=ShortForm())
    assert whole.outcome == CaptureOutcome.CAPTURED
    assert whole.payload.summary == capture(CaptureTransform.summary(), value).payload.summary
    assert whole.payload.count == value.size and whole.payload.nonfinite == 0
    backend = ShortForm()
    part = capture(CaptureTransform.summary(), value, slices=[CaptureSlice("a2", 1, 3)], backend=backend)
    assert backend.asked == 1 and part.payload.count == 2 * 3 * 2
    assert part.payload.summary.max == float(value[:, :, 1:3].max())
    assert len(part.to_json()) <= part.charged.encoded_bytes


def a_histogram_payload() -> CapturePayload:
    return CapturePayload.histogram([0.0, 1.0], [3])


# The payload answer is built per test, as TENSOR_TRANSFORMS' values are: one made here would be
# held by the collected test for the rest of the run, and past the interpreter's exit.
@pytest.mark.parametrize("answer, why", [
    ([1.0, 2.0, 3.0], "a list of 3 values"),
    ([1.0, 2.0, float("nan"), 0.5], "non-finite"),
    ([1.0, 2.0, "mean", 0.5], "TypeError: must be real number, not str"),
    ((1.0, 2.0, 0.5, 0.5), r"wrong type \(a list \[min, max, mean, std\] or a CapturePayload\)"),
    (a_histogram_payload, "a payload that is not a summary"),
])
def test_a_malformed_short_form_fails_the_capture_and_names_what_is_wrong(answer, why):
    answer = answer() if callable(answer) else answer
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(),
                          request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match=f"backend.summary_statistics.*{why}"):
        session.observe(ShortForm(answer), "p", sample(np.float32))
    record = session.take_step().record("s")
    assert record.outcome == CaptureOutcome.FAILED and record.payload is None
    assert re.search(why, record.message), record.message
    # The session goes on: the next step captures through a well-formed backend.
    session.begin_step(DECODE, 1)
    session.observe(ShortForm(), "p", sample(np.float32))
    assert session.take_step().record("s").outcome == CaptureOutcome.CAPTURED


def test_a_short_form_backend_may_answer_with_a_payload_and_an_empty_region_needs_no_backend():
    payload = CapturePayload.summary(24, 3, 0.0, 1.0, 0.5, 0.25)
    answered = capture(CaptureTransform.summary(), sample(np.float32), backend=ShortForm(payload)).payload
    assert answered.summary == payload.summary
    backend = ShortForm()
    empty = capture(CaptureTransform.summary(), np.zeros((2, 0, 4), np.float32), backend=backend)
    assert empty.outcome == CaptureOutcome.CAPTURED and backend.asked == 0
    assert empty.payload.count == 0 and empty.payload.nonfinite == 0 and np.isnan(empty.payload.summary.mean)
    # The same answer as a backend that summarizes the empty region itself.
    plain = capture(CaptureTransform.summary(), np.zeros((2, 0, 4), np.float32)).payload
    assert (plain.count, plain.nonfinite) == (0, 0) and np.isnan(plain.summary.mean)


def test_a_summary_records_json_stays_within_its_charge_whatever_its_numbers_print_as():
    # A point's summary records differ from step to step only in their numbers: from the
    # shortest text to the widest a double and a count print as, and across a change of rank.
    disc = CaptureDiscovery("payloads", [ObservationPoint("p", [Axis("rows", None), Axis("d", None)])])
    session = CaptureSession(CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())],
                                         unlimited()).admit(disc, CaptureRequest(1, 1, 8)))
    widest = -2.2250738585072014e-308
    # (A std is never negative: the widest it prints is a subnormal's digits without the sign.)
    answers = [[0.0, 0.0, 0.0, 0.0], [widest, widest, widest, -widest], [widest, 1e308, -1e-300, 2.5e-310]]
    shapes = [(1, 1), (999, 1001), (999, 1001)]
    for prediction, (answer, shape) in enumerate(zip(answers, shapes)):
        session.begin_step(PREFILL if prediction == 0 else DECODE, prediction)
        session.observe(ShortForm(answer), "p", np.zeros(shape, np.float32))
        record = session.take_step().record("s")
        assert record.outcome == CaptureOutcome.CAPTURED and record.payload.count == shape[0] * shape[1]
        assert len(record.to_json()) <= record.charged.encoded_bytes
        assert json.loads(record.to_json())["payload"]["min"] == answer[0]


class Recording(NumpyBackend):
    """NumpyBackend keeping the requests its summary short form was asked."""

    def __init__(self):
        self.requests = []

    def summary_statistics(self, tensor, request):
        self.requests.append(request)
        return super().summary_statistics(tensor, request)


def test_the_numpy_backend_answers_a_summary_in_the_short_form_only_when_all_is_finite():
    backend = Recording()
    value = sample(np.float32)
    record = capture(CaptureTransform.summary(), value, backend=backend)
    assert len(backend.requests) == 1 and record.payload.summary.count == value.size
    request = backend.requests[0]
    values = value.astype(np.float64)
    assert NumpyBackend().summary_statistics(value, request) == [
        float(values.min()), float(values.max()), float(values.mean()), float(values.std())]
    # A non-finite value: the payload, with the statistics of the finite ones.
    with_nan = value.copy()
    with_nan[0, 0, 0] = np.nan
    payload = NumpyBackend().summary_statistics(with_nan, request)
    assert (payload.summary.count, payload.summary.nonfinite) == (value.size, 1)
    assert payload.summary.max == float(values.max())
    # Through a session, a region holding a NaN is recorded as transform records it.
    assert capture(CaptureTransform.summary(), with_nan).payload.summary.nonfinite == 1
    with pytest.raises(LifecoreTypeError, match="NumpyBackend.summary_statistics"):
        NumpyBackend().summary_statistics([1.0], request)
    previews = []

    class KeepPreview(NumpyBackend):
        def transform(self, tensor, request):
            previews.append(request)
            return super().transform(tensor, request)

    capture(CaptureTransform.preview(4), value, backend=KeepPreview())
    with pytest.raises(ValueError, match="SUMMARY request"):
        NumpyBackend().summary_statistics(value, previews[0])


def test_a_tensor_payload_from_numbers_holds_exactly_its_shape():
    # Once accepted: reading .tensor then viewed memory past the values (a crash for a large shape).
    for shape, values in (([4], [1.0]), ([2, 3], [1.0] * 5), ([1 << 28], [1.0]), ([2**32, 2**32, 2**32], [])):
        with pytest.raises(InvalidArgumentError, match="^CapturePayload.tensor: argument 'shape' holds"):
            CapturePayload.tensor(shape, values)
    assert CapturePayload.tensor([2, 2], [1.0, 2.0, 3.0, 4.0]).tensor.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert CapturePayload.tensor([], [1.0, 2.0]).tensor.tolist() == [1.0, 2.0]  # an empty shape reads them flat


def test_counts_and_ids_past_int64_are_refused_not_read_back_negative():
    with pytest.raises(LifecoreOverflowError, match=r"^CapturePayload.candidates: argument 'ids' holds 9223372036854775808 at 1"):
        CapturePayload.candidates([3, 2**63], [0.5, 0.25])
    with pytest.raises(LifecoreOverflowError, match="^CapturePayload.histogram: argument 'counts' holds"):
        CapturePayload.histogram([0.0, 1.0], [2**64 - 1])
    top = CapturePayload.candidates([2**63 - 1], [1.0])
    assert top.candidate_ids.tolist() == [2**63 - 1]



@pytest.mark.parametrize("text, shown", [("first\x00second", "first\x00second"), ("bad \udcff byte", "bad \\udcff byte")],
                         ids=["nul", "surrogate"])
def test_a_backend_exception_is_quoted_whole(text, shown):
    # Before: its text ended at a NUL, and a lone surrogate (which UTF-8 cannot encode) lost it
    # all but the exception's type.
    class Failing(NumpyBackend):
        def summary_statistics(self, tensor, request):
            raise ValueError(text)

    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery(SHAPE),
                          request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError) as caught:
        session.observe(Failing(), "p", sample(np.float32))
    assert f"backend.summary_statistics: ValueError: {shown}" in str(caught.value)
    assert f"ValueError: {shown}" in session.take_step().record("s").message


def test_int64_arrays_hold_numpys_own_int64_scalars():
    """Ids and counts are typed NDArray[numpy.int64]: their dtype is NumPy's int64 itself, so
    an element is a numpy.int64 (a 'long long' array compares equal to int64 but its scalars
    are another type where int64 is 'long')."""
    top = CapturePayload.candidates([9, 3], [5.0, 2.0])
    hist = CapturePayload.histogram([0.0, 1.0, 2.0], [3, 4])
    for array in (top.candidate_ids, top.candidates.ids, hist.histogram.counts):
        assert array.dtype.type is np.int64 and isinstance(array[0], np.int64)


def test_a_masked_array_is_no_payload() -> None:
    # Before: accepted, and the values beneath the mask kept as if they were not masked.
    with pytest.raises(InvalidArgumentError, match=r"^CapturePayload.from_array: argument 'array' is a NumPy masked "
                                                   r"array"):
        CapturePayload.from_array(np.ma.array([1.0, 2.0], mask=[True, False]))


def test_usage_fields_refuse_what_is_no_count_naming_the_field() -> None:
    # Before: None met nanobind's plain TypeError, and a bool was named "(): argument 'arg'".
    u = CaptureUsage(1, 2, 3, 4)
    for value in (None, True, "1"):
        with pytest.raises(LifecoreTypeError, match=r"^CaptureUsage\.?[a-z_]*: argument '(captures|value)'"):
            u.captures = value
    assert u.as_tuple() == (1, 2, 3, 4)


@pytest.mark.parametrize("make", [lambda: CaptureTransform.preview(5), CaptureTransform.full_tensor,
                                  CaptureTransform.summary, lambda: CaptureTransform.histogram([0.0, 5.0, 12.0]),
                                  lambda: CaptureTransform.top_candidates(2)])
def test_a_numpy_matrix_is_read_as_the_array_it_is(make):
    """np.matrix keeps two dimensions through ravel and indexing: a preview of one was the
    whole matrix (the session refused the backend's 12 elements for the 5 asked)."""
    transform = make()
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = capture(transform, array)
    with pytest.warns(PendingDeprecationWarning):
        matrix = np.matrix(array)
    got = capture(transform, matrix)
    assert got.outcome == expected.outcome  # a preview is TRUNCATED (5 of 12 kept), the rest CAPTURED
    assert got.outcome in (CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED)
    got, expected = got.payload, expected.payload
    assert got.kind == expected.kind
    read = {"summary": ("stats",), "histogram": ("counts", "bin_edges"),
            "candidates": ("candidate_ids", "scores")}.get(str(got.kind), ("shape", "tensor"))
    for values in read:
        assert np.array_equal(np.asarray(getattr(got, values)), np.asarray(getattr(expected, values))), values


@pytest.mark.skipif(np.finfo(np.longdouble).bits <= 64, reason="numpy.longdouble is float64 on this platform")
@pytest.mark.parametrize("transform", [CaptureTransform.summary, lambda: CaptureTransform.histogram([0.0, 8.0, 64.0]),
                                       lambda: CaptureTransform.top_candidates(2)], ids=["summary", "histogram", "top"])
def test_floats_wider_than_float64_are_refused_not_read_as_inf(transform):
    # Before: finite long doubles past float64's range were read as inf, so a summary said all
    # of them were not finite (and a histogram counted none), recorded CAPTURED.
    value = sample(np.longdouble) * np.longdouble(10) ** 400
    assert np.isfinite(value).all()
    with pytest.raises(CaptureSessionError, match="would be read in float64") as caught:
        capture(transform(), value)
    assert isinstance(caught.value.__cause__, InvalidArgumentError)


@pytest.mark.parametrize("name", list(TENSOR_TRANSFORMS))
def test_an_object_array_kept_as_a_tensor_payload_is_refused_by_its_element_type(name):
    # Before: NumPy's own "cannot create an OBJECT array from memory buffer" (a ValueError).
    transform, slices, _ = TENSOR_TRANSFORMS[name]()
    with pytest.raises(CaptureSessionError, match="holds object elements, which a payload cannot keep") as caught:
        capture(transform, np.ones(SHAPE, object), slices=slices)
    assert isinstance(caught.value.__cause__, InvalidArgumentError)
