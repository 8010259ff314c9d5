"""Shared scaffolding for the driver-layer tests that run against a fake vendor library.

A fake library (tests/fake_driver/*.c) is compiled with the system C compiler and loaded in a
subprocess per scenario, because a vendor library loads once per process. A scenario is a body
of Python run after PRELUDE; it fills ``result``, which comes back as JSON. HANDLE_CASES is the
part of the handle-refusal scenario that every backend shares: each handle kind, unknown and
destroyed, passed to every operation that takes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAKE_DRIVERS = Path(__file__).parent / "fake_driver"

PRELUDE = """
import json, struct, lifecore
from lifecore import _core
result = {}

def refusal(call, *args):
    try:
        call(*args)
    except lifecore.DriverError as error:
        return [error.code, error.call]
    return None

def argument_refusal(call, *args):  # the InvalidArgumentError's message, or "accepted"
    try:
        call(*args)
    except lifecore.InvalidArgumentError as error:
        return str(error)
    return "accepted"

UNKNOWN = 0x5151
"""

# Defines handle_refusal_cases(...): {case name: refusal(...)} for every operation that takes a
# stream, an event, a module, a graph or an executable graph, each unknown and destroyed.
HANDLE_CASES = """
def handle_refusal_cases(driver, *, stream, gone_stream, event, gone_event, function, gone_module,
                         graph, gone_graph, exec_, gone_exec, args, ptr, async_ptr):
    cases = {}
    for label, bad in (("unknown", UNKNOWN), ("destroyed", gone_stream)):
        cases[f"stream_synchronize {label}"] = refusal(driver.stream_synchronize, bad)
        cases[f"stream_query {label}"] = refusal(driver.stream_query, bad)
        cases[f"stream_destroy {label}"] = refusal(driver.stream_destroy, bad)
        cases[f"event_record {label} stream"] = refusal(driver.event_record, event, bad)
        cases[f"mem_alloc_async {label}"] = refusal(driver.mem_alloc_async, 16, bad)
        cases[f"mem_free_async {label}"] = refusal(driver.mem_free_async, async_ptr, bad)
        cases[f"memset_d32_async {label}"] = refusal(driver.memset_d32_async, ptr, 9, 4, bad)
        cases[f"launch {label} stream"] = refusal(driver.launch, function, (1, 1, 1), (4, 1, 1), bad, args, 0)
        cases[f"begin_capture {label}"] = refusal(driver.begin_capture, bad, "relaxed")
        cases[f"end_capture {label}"] = refusal(driver.end_capture, bad)
        cases[f"capture_info {label}"] = refusal(driver.capture_info, bad)
        cases[f"graph_launch {label} stream"] = refusal(driver.graph_launch, exec_, bad)
        cases[f"graph_upload {label} stream"] = refusal(driver.graph_upload, exec_, bad)
    for label, bad in (("unknown", UNKNOWN), ("destroyed", gone_event)):
        cases[f"event_record {label}"] = refusal(driver.event_record, bad, stream)
        cases[f"event_synchronize {label}"] = refusal(driver.event_synchronize, bad)
        cases[f"event_destroy {label}"] = refusal(driver.event_destroy, bad)
        cases[f"event_elapsed {label} first"] = refusal(driver.event_elapsed, bad, event)
        cases[f"event_elapsed {label} second"] = refusal(driver.event_elapsed, event, bad)
    for label, bad in (("unknown", UNKNOWN), ("destroyed", gone_module)):
        cases[f"module_get_function {label}"] = refusal(driver.module_get_function, bad, "axpy_f32")
        cases[f"module_unload {label}"] = refusal(driver.module_unload, bad)
    for label, bad in (("unknown", UNKNOWN), ("destroyed", gone_graph)):
        cases[f"graph_instantiate {label}"] = refusal(driver.graph_instantiate, bad)
        cases[f"graph_node_counts {label}"] = refusal(driver.graph_node_counts, bad)
        cases[f"graph_destroy {label}"] = refusal(driver.graph_destroy, bad)
        cases[f"graph_exec_update {label} graph"] = refusal(driver.graph_exec_update, exec_, bad)
    for label, bad in (("unknown", UNKNOWN), ("destroyed", gone_exec)):
        cases[f"graph_launch {label}"] = refusal(driver.graph_launch, bad, stream)
        cases[f"graph_upload {label}"] = refusal(driver.graph_upload, bad, stream)
        cases[f"graph_exec_update {label}"] = refusal(driver.graph_exec_update, bad, graph)
        cases[f"graph_exec_destroy {label}"] = refusal(driver.graph_exec_destroy, bad)
    return cases
"""


def timed_events_scenario(backend: str, library_variable: str, counter: str) -> str:
    """A scenario body: host writes and reads, a DLPack export to another stream and a release
    (events that only order work), then a profile (the only events with timing), counted by the
    fake library's ``counter`` (events created with timing)."""
    return f"""
    import ctypes, os
    import numpy as np
    fake = ctypes.CDLL(os.environ["{library_variable}"])
    timed = getattr(fake, "{counter}")
    timed.restype = ctypes.c_long
    device = lifecore.Device("{backend}")
    s = device.stream()
    s.sync()
    before = timed()
    buf = s.alloc(64)
    s.write(buf, np.arange(16, dtype=np.float32).tobytes())
    capsule = buf.__dlpack__(stream=4096)  # the consumer's stream waits on an event
    result["read"] = np.frombuffer(s.read(buf), np.float32).tolist()
    del capsule
    buf.free()
    s.sync()
    result["ordering"] = timed() - before
    with s.profile() as p:
        pass
    result["profile"] = [timed() - before, p.elapsed_ms]
    device.close()
    """


def collected_during_recording_scenario(backend: str, modes: tuple[str, ...]) -> str:
    """A scenario body: for each capture mode, a Device (its stream, memory, module and a sealed,
    replayed graph in use) left in a reference cycle, then another Device of the same GPU recording
    while Python collects the first, on another thread, then on the recording thread; the
    recording must still seal. ``result["<where>, <mode>"]`` is the sealed graph's node count."""
    return f"""
    import gc, threading
    from lifecore import kernels as K
    gc.disable()  # the cycle goes only when the scenario collects it, inside the recording
    for collecting in ("another thread", "the recording thread"):
        for mode in {modes!r}:
            earlier = lifecore.Device("{backend}", capture_mode=mode)
            e = earlier.stream()
            x = e.alloc(4096)
            e.fill(x, 1)
            e.launch(K.scale_f32, 4, 256, [1024, 2.0, x, x])
            sealed = e.capture(lambda st: st.fill(x, 2))
            sealed.replay()
            cycle = [earlier, e, x, sealed]
            cycle.append(cycle)  # only the collector frees it
            del earlier, e, x, sealed, cycle
            recording = lifecore.Device("{backend}", capture_mode=mode)
            s = recording.stream()
            buf = s.alloc(64)
            s.graph_prepare()
            s.begin_capture()
            s.fill(buf, 3)
            if collecting == "another thread":
                worker = threading.Thread(target=gc.collect)
                worker.start()
                worker.join()
            else:
                gc.collect()
            graph = s.end_capture()  # refused as invalidated if the teardown broke the recording
            result[f"{{collecting}}, {{mode}}"] = graph.node_count
            graph.destroy()
            recording.close()
    """


def build_fake_library(tmp_path_factory: pytest.TempPathFactory, source: str, what: str,
                       defines: tuple[str, ...] = ()) -> Path:
    """Compiles tests/fake_driver/<source> (with -D``defines``) into a shared library, or skips
    saying why not."""
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        pytest.skip(f"no C compiler to build the {what}")
    library = tmp_path_factory.mktemp(Path(source).stem) / f"{Path(source).stem}.so"
    built = subprocess.run([compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-O1",
                            *(f"-D{name}" for name in defines), "-o", str(library),
                            str(FAKE_DRIVERS / source)], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"the {what} did not compile: {built.stderr.strip()[:400]}")
    return library


def run_scenario(body: str, environment: dict[str, str]) -> dict:
    """Runs PRELUDE, HANDLE_CASES and ``body`` in a fresh interpreter; returns its ``result``."""
    code = PRELUDE + HANDLE_CASES + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, f"scenario crashed ({done.returncode}): {done.stderr[-2000:]}"
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


def run_with_fake_cuda(library: Path, body: str, **env: str) -> dict:
    """run_scenario with ``library`` as the CUDA driver: the caller's FAKE_CUDA_* settings are
    dropped and ``env`` added."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    environment.update(env)
    environment["LIFECORE_LIBCUDA"] = str(library)
    return run_scenario(body, environment)
