"""A tensor whose producer's stream another library is capturing (torch inside
torch.cuda.graph, say), against the fake CUDA driver (tests/fake_driver/fake_libcuda.c), each
scenario in a fresh interpreter.

On CUDA an event recorded on a captured stream and waited for on another stream makes that
other stream join the capture: its later work is recorded there, not run, and the capture
cannot end until it is joined back. So lifecore asks a CUDA-array-interface producer's stream
first (fake_cuda_set_foreign_capture marks one as captured) and refuses before issuing
anything; and a DLPack producer, which orders the stream it is handed itself, is checked
afterwards: a stream it made join its capture (fake_cuda_join_capture does what torch's
__dlpack__ does there) refuses every call until that capture ends.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from driver_scenarios import run_with_fake_cuda
from test_foreign_cai_fake import SETUP


def run_fake(library: Path, body: str, **env: str) -> dict:
    return run_with_fake_cuda(library, SETUP + textwrap.dedent(body), **env)


def test_a_producer_stream_another_library_captures_is_refused_before_anything_is_issued(fake_libcuda) -> None:
    """Recording on a stream another library captures (torch.cuda.graph, say) and waiting for it
    here would make this stream join that capture: its work recorded there, not run, and
    lifecore's stream state no longer true of the driver. The call is refused first."""
    body = """
    fake.fake_cuda_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    fake.fake_cuda_capture_queries.restype = ctypes.c_long
    a, b = device_array(value=1.0), device_array(value=2.0)
    buf = s.alloc(64)
    s.fill(buf, 0)
    s.sync()

    def refusal(call, *args):
        before, queries = counts(), fake.fake_cuda_capture_queries()
        try:
            call(*args)
        except lifecore.CaptureStateError as error:
            return [str(error), since(before), fake.fake_cuda_capture_queries() - queries]
        return "accepted"

    fake.fake_cuda_set_foreign_capture(PRODUCER, 1)  # active
    result["fill"] = refusal(s.fill, Cai(a, stream=PRODUCER), SEVEN)
    result["copy"] = refusal(s.copy, buf, Cai(a, stream=PRODUCER))
    # The capturing producer is asked second (by address): the first is not waited for either.
    result["copy_second"] = refusal(s.copy, Cai(b, stream=PRODUCER - 16), Cai(a, stream=PRODUCER))
    result["launch"] = refusal(s.launch, K.scale_f32, 1, 16, [16, 2.0, Cai(a, stream=PRODUCER), Cai(b)])
    fake.fake_cuda_set_foreign_capture(PRODUCER, 2)  # invalidated, not yet ended
    result["invalidated"] = refusal(s.fill, Cai(a, stream=PRODUCER), SEVEN)
    fake.fake_cuda_set_foreign_capture(1, 906)  # the legacy stream while a blocking stream captures
    result["implicit"] = refusal(s.fill, Cai(a, stream=1), SEVEN)
    s.sync()
    result["untouched"] = [a.tolist(), np.frombuffer(s.read(buf), np.float32).tolist()]
    fake.fake_cuda_set_foreign_capture(PRODUCER, 0)  # that capture ended
    fake.fake_cuda_set_foreign_capture(1, 0)
    before = counts()
    s.copy(buf, Cai(a, stream=PRODUCER))
    result["after"] = [since(before), np.frombuffer(s.read(buf), np.float32).tolist()]
    """
    result = run_fake(fake_libcuda, body)
    fill = result["fill"]
    assert fill[0].startswith("fill: argument 'buf' comes from the producer's stream, native stream 0x7000, "
                              "is being captured into a graph")
    assert "would make this stream join that capture" in fill[0] and "nothing was issued" in fill[0]
    assert fill[1:] == [[0, 0], 1]  # asked, then nothing recorded and nothing waited for
    assert result["copy"][0].startswith("copy: argument 'src' comes from the producer's stream, native stream 0x7000")
    assert result["copy"][1] == [0, 0]
    assert result["copy_second"][0].startswith("copy: argument 'src'") and result["copy_second"][1:] == [[0, 0], 2]
    assert result["launch"][0].startswith("launch: argument 'x' comes from the producer's stream, native stream 0x7000")
    assert result["launch"][1] == [0, 0]
    assert "capture that was invalidated" in result["invalidated"][0] and result["invalidated"][1] == [0, 0]
    assert "native stream 0x1, is the legacy default stream while a blocking stream is being captured" \
        in result["implicit"][0]
    assert result["implicit"][1] == [0, 0]
    assert result["untouched"] == [[1.0] * 16, [0.0] * 16]
    assert result["after"] == [[1, 1], [1.0] * 16]  # the stream is usable, and orders as before


def test_a_dlpack_producer_that_makes_the_stream_join_its_capture_is_caught(fake_libcuda) -> None:
    """torch's __dlpack__(stream=) records an event on its current stream and makes the handed
    stream wait for it: inside torch.cuda.graph that makes lifecore's stream join torch's
    capture. The call is refused with nothing issued, the stream refuses every call while the
    driver still captures it, and it is usable again once that capture has ended."""
    body = """
    import sys
    sys.path.insert(0, os.environ["LIFECORE_TESTS"])
    from dlpack_producer import Producer
    fake.fake_cuda_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    fake.fake_cuda_join_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    a = device_array(value=1.0)
    handed = []

    def order(stream):  # what torch does with the stream it is handed
        handed.append(stream)
        fake.fake_cuda_join_capture(stream, PRODUCER)

    tensor = Producer(a.ctypes.data, (16,), device=(2, 0), on_export=order)
    buf = s.alloc(64)
    s.fill(buf, 0)
    s.sync()
    s.fill(tensor, SEVEN)  # nothing captures the producer's stream: an ordinary fill
    s.sync()
    result["eager"] = [a.tolist()[:2], handed == [s.handle]]
    a[:] = 1.0
    fake.fake_cuda_set_foreign_capture(PRODUCER, 1)  # the producer's library begins a capture

    def refusal(call, *args):
        before = counts()
        try:
            call(*args)
        except lifecore.CaptureStateError as error:
            return [str(error), since(before)]
        return "accepted"

    result["fill"] = refusal(s.fill, tensor, SEVEN)
    result["fill_again"] = refusal(s.fill, tensor, SEVEN)  # the stream is handed again: the call says so
    result["launch"] = refusal(s.launch, K.scale_f32, 1, 16, [16, 2.0, tensor, tensor])
    result["sync"] = refusal(s.sync)
    result["copy"] = refusal(s.copy, buf, buf)
    result["alloc"] = refusal(s.alloc, 64)
    result["untouched"] = a.tolist()[:2]
    fake.fake_cuda_set_foreign_capture(PRODUCER, 0)  # that capture ended
    s.sync()
    s.copy(buf, tensor)
    result["after"] = np.frombuffer(s.read(buf), np.float32).tolist()[:2]
    """
    result = run_fake(fake_libcuda, body, LIFECORE_TESTS=str(Path(__file__).parent))
    assert result["eager"] == [[7.0, 7.0], True]
    fill = result["fill"]
    assert fill[0].startswith("fill: a tensor's producer, asked to order this stream after its own (DLPack's "
                              "stream=), made it join a graph capture of its own")
    assert "Nothing was issued" in fill[0] and fill[1] == [0, 0]
    for key, call in (("fill_again", "fill"), ("launch", "launch"), ("sync", "sync"), ("copy", "copy"),
                      ("alloc", "alloc")):
        assert result[key][0].startswith(f"{call}: this stream joined another library's graph capture"), result[key]
        assert result[key][1] == [0, 0]
    assert result["untouched"] == [1.0, 1.0]
    assert result["after"] == [1.0, 1.0]


def test_a_join_is_caught_when_the_call_fails_after_the_export(fake_libcuda) -> None:
    """The producer's ordering happens inside its __dlpack__: a call that refuses the tensor
    afterwards (its description, or another argument) has still had its stream joined to the
    producer's capture. The stream must refuse every later call until that capture ends, not
    issue them into the other library's graph."""
    body = """
    import sys
    sys.path.insert(0, os.environ["LIFECORE_TESTS"])
    from dlpack_producer import Producer
    fake.fake_cuda_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    fake.fake_cuda_join_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    a = device_array(value=1.0)

    def order(stream):  # what torch does with the stream it is handed
        fake.fake_cuda_join_capture(stream, PRODUCER)

    buf = s.alloc(64)
    s.sync()

    def outcome(call, *args):
        before = counts()
        try:
            call(*args)
        except lifecore.LifecoreError as error:
            return [type(error).__name__, str(error), since(before)]
        return ["accepted", "", since(before)]

    fake.fake_cuda_set_foreign_capture(PRODUCER, 1)  # the producer's library begins a capture
    odd = Producer(a.ctypes.data, (16,), bits=12, device=(2, 0), on_export=order)  # refused once exported
    result["odd"] = outcome(s.fill, odd, SEVEN)
    result["after_odd"] = outcome(s.fill, buf, 0)
    fake.fake_cuda_set_foreign_capture(PRODUCER, 0)  # that capture ended
    result["ended"] = outcome(s.fill, buf, 0)
    fake.fake_cuda_set_foreign_capture(PRODUCER, 1)  # another capture
    tensor = Producer(a.ctypes.data, (16,), device=(2, 0), on_export=order)
    result["second_bad"] = outcome(s.copy, tensor, object())  # dst exported, then src refused
    result["after_second_bad"] = outcome(s.copy, buf, buf)
    fake.fake_cuda_set_foreign_capture(PRODUCER, 0)
    result["ended_again"] = outcome(s.sync)
    """
    result = run_fake(fake_libcuda, body, LIFECORE_TESTS=str(Path(__file__).parent))
    assert result["odd"][0] == "CaptureStateError", result["odd"]
    assert result["odd"][1].startswith("fill: a tensor's producer, asked to order this stream after its own")
    assert result["after_odd"][0] == "CaptureStateError", result["after_odd"]
    assert result["after_odd"][1].startswith("fill: this stream joined another library's graph capture")
    assert result["ended"] == ["accepted", "", [0, 0]]
    assert result["second_bad"][0] == "CaptureStateError", result["second_bad"]
    assert result["second_bad"][1].startswith("copy: a tensor's producer")
    assert result["after_second_bad"][0] == "CaptureStateError", result["after_second_bad"]
    assert result["ended_again"] == ["accepted", "", [0, 0]]


def test_a_torch_tensor_while_torch_captures_is_refused_before_torch_is_asked_to_export(fake_libcuda) -> None:
    """torch's __dlpack__(stream=) would join the handed stream to the capture torch is making,
    and that capture could then never end. So while torch.cuda.is_current_stream_capturing(),
    a torch tensor is refused before its export: nothing issued, torch's capture left whole.
    (torch here has no CUDA: a CPU tensor's subclass stands for a CUDA one, and the capture
    query is patched.)"""
    torch = pytest.importorskip("torch")
    del torch
    body = """
    import sys
    import torch
    sys.path.insert(0, os.environ["LIFECORE_TESTS"])
    from dlpack_producer import Producer
    a = device_array(value=1.0)
    producer = Producer(a.ctypes.data, (16,), device=(2, 0))
    exported = []

    class CudaLike(torch.Tensor):  # what lifecore sees of a CUDA tensor: its device and its export
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, **kw):
            exported.append(stream)
            return producer.__dlpack__(stream=stream, **kw)

    tensor = torch.zeros(16).as_subclass(CudaLike)
    capturing = [False]
    torch.cuda.is_current_stream_capturing = lambda: capturing[0]
    buf = s.alloc(64)
    s.copy(buf, tensor)  # torch captures nothing: exported, ordered, copied
    result["eager"] = [len(exported), np.frombuffer(s.read(buf), np.float32).tolist()[:2]]
    capturing[0] = True
    before = counts()
    try:
        s.fill(tensor, SEVEN)
        result["capturing"] = "accepted"
    except lifecore.CaptureStateError as error:
        result["capturing"] = str(error)
    result["after_refusal"] = [len(exported), since(before), a.tolist()[:2]]
    capturing[0] = False
    s.fill(buf, 0)  # the stream never joined anything
    result["usable"] = np.frombuffer(s.read(buf), np.float32).tolist()[:2]
    """
    result = run_fake(fake_libcuda, body, LIFECORE_TESTS=str(Path(__file__).parent))
    assert result["eager"] == [1, [1.0, 1.0]]
    assert result["capturing"].startswith("fill: argument 'buf' is a torch tensor, and torch is capturing a CUDA "
                                          "graph on its current stream")
    assert "torch's capture is left whole" in result["capturing"]
    assert result["after_refusal"] == [1, [0, 0], [1.0, 1.0]]  # not exported again, nothing issued
    assert result["usable"] == [0.0, 0.0]


def test_a_cupy_array_while_cupy_captures_is_refused_before_cupy_is_asked_to_export(fake_libcuda) -> None:
    """CuPy's __dlpack__(stream=) records an event on CuPy's current stream and makes the
    handed stream wait for it: inside a CuPy graph capture that joins lifecore's stream to the
    capture. So CuPy's current stream is asked first (by its native handle, as a producer's
    stream is) and a capturing one refuses the call before the export: nothing issued, CuPy's
    capture left whole. (CuPy is not installed here: a module under its name stands for it,
    with the two things lifecore reads of it, its ndarray type and its current stream.)"""
    body = """
    import sys, types
    sys.path.insert(0, os.environ["LIFECORE_TESTS"])
    from dlpack_producer import Producer
    fake.fake_cuda_set_foreign_capture.argtypes = [ctypes.c_ulonglong, ctypes.c_int]
    a = device_array(value=1.0)
    producer = Producer(a.ctypes.data, (16,), device=(2, 0))
    exported = []

    class ndarray:  # what lifecore sees of a CuPy array: its device and its export
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, **kw):
            exported.append(stream)
            return producer.__dlpack__(stream=stream, **kw)

    current = types.SimpleNamespace(ptr=PRODUCER)
    cupy = types.ModuleType("cupy")
    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: current)
    sys.modules["cupy"] = cupy
    array = ndarray()
    buf = s.alloc(64)
    s.copy(buf, array)  # CuPy captures nothing: exported, ordered, copied
    result["eager"] = [len(exported), np.frombuffer(s.read(buf), np.float32).tolist()[:2]]

    def attempt(call, *args):
        before, seen = counts(), len(exported)
        try:
            call(*args)
            return ["accepted", len(exported) - seen]
        except lifecore.CaptureStateError as error:
            return [str(error), since(before), len(exported) - seen]

    fake.fake_cuda_set_foreign_capture(PRODUCER, 1)  # CuPy's current stream captures
    result["capturing"] = attempt(s.fill, array, SEVEN)
    result["launch"] = attempt(s.launch, K.scale_f32, 1, 16, [16, 2.0, array, buf])
    fake.fake_cuda_set_foreign_capture(PRODUCER, 2)  # invalidated, not yet ended
    result["invalidated"] = attempt(s.fill, array, SEVEN)
    result["untouched"] = a.tolist()[:2]
    # lifecore's own stream as CuPy's current one: the export orders nothing, nothing to ask.
    current.ptr = s.handle
    result["own"] = attempt(s.copy, buf, array)
    # A CuPy that cannot say its stream (no device) has no capture to join.
    current.ptr = PRODUCER
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: (_ for _ in ()).throw(RuntimeError("no device")))
    result["unanswered"] = attempt(s.copy, buf, array)
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: current)
    fake.fake_cuda_set_foreign_capture(PRODUCER, 0)  # that capture ended
    result["ended"] = attempt(s.fill, array, SEVEN)
    s.sync()
    result["filled"] = a.tolist()[:2]
    """
    result = run_fake(fake_libcuda, body, LIFECORE_TESTS=str(Path(__file__).parent))
    assert result["eager"] == [1, [1.0, 1.0]]
    message, issued, exports = result["capturing"]
    assert message.startswith("fill: argument 'buf' is a CuPy array, and CuPy's current stream, native stream "
                              "0x7000, is being captured into a graph"), message
    assert "CuPy's capture is left whole" in message and message.endswith("nothing was issued")
    assert (issued, exports) == ([0, 0], 0)  # refused before the export: CuPy never asked
    assert result["launch"][0].startswith("launch: argument 'x' is a CuPy array")
    assert result["launch"][1:] == [[0, 0], 0]
    assert "capture that was invalidated" in result["invalidated"][0] and result["invalidated"][1:] == [[0, 0], 0]
    assert result["untouched"] == [1.0, 1.0]
    assert result["own"] == ["accepted", 1]
    assert result["unanswered"] == ["accepted", 1]
    assert result["ended"] == ["accepted", 1]
    assert result["filled"] == [7.0, 7.0]
