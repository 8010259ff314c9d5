"""A process whose daemon threads are inside lifecore calls when Python exits ends cleanly.

At exit the interpreter ends a daemon thread that asks for the interpreter lock again (Python
3.11 to 3.13 unwind it with pthread_exit): a lifecore call returning from a blocking wait must
not turn that into a crash of the whole process (std::terminate, SIGABRT).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Each body leaves a daemon thread inside a blocking lifecore call (or calling one in a loop)
# while the main thread exits.
BODIES = {
    "a registration's wait, woken by the device closing at exit": """
        from lifecore.sequence import AdmissionCoordinator
        device = lifecore.Device(lifecore.testing.emulated_backend())
        coordinator = AdmissionCoordinator(device, domains={"kv": 1024}, page_bytes=1024, tokens_per_page=16,
                                           max_active_sequences=4)
        held = coordinator.admit("a", 16, 16).resources.open_session()
        registration = coordinator.register_waiter(coordinator.admit("b", 16, 16))
        threading.Thread(target=lambda: registration.wait(None), daemon=True).start()
    """,
    "a registration's wait on host accounting, with a slow exit": """
        from lifecore.sequence import AdmissionCoordinator
        coordinator = AdmissionCoordinator(None, domains={"kv": 1024}, page_bytes=1024, tokens_per_page=16,
                                           max_active_sequences=4)
        held = coordinator.admit("a", 16, 16).resources.open_session()
        registration = coordinator.register_waiter(coordinator.admit("b", 16, 16))
        threading.Thread(target=lambda: registration.wait(None), daemon=True).start()
        garbage = [list(range(100)) for _ in range(200000)]  # the exit takes a while to free it
    """,
    "stream syncs in a loop": """
        device = lifecore.Device(lifecore.testing.emulated_backend())
        stream = device.stream()
        buffer = stream.alloc(1 << 20)

        def loop():
            while True:
                stream.fill(buffer, 1)
                stream.sync()

        threading.Thread(target=loop, daemon=True).start()
    """,
    "a KV arena's free, waiting for its stream, with a slow exit": """
        from lifecore.sequence import AdmissionCoordinator
        device = lifecore.Device(lifecore.testing.emulated_backend())
        coordinator = AdmissionCoordinator(device, domains={"kv": 8 * 4096}, page_bytes=4096, tokens_per_page=16,
                                           max_active_sequences=4)
        arena = coordinator.arena()
        del coordinator
        device._pause_streams_for(1.0)
        arena.stream.launch(lifecore.kernels.scale_f32, 4, 64, [256, 2.0, arena, arena])
        threading.Thread(target=arena.free, daemon=True).start()

        class SlowExit:  # keeps the exit busy past the wait's end, so the thread asks for the lock then
            def __del__(self, sleep=time.sleep):
                sleep(2)

        import sys, types
        sys.modules["zz_slow_exit"] = types.ModuleType("zz_slow_exit")
        sys.modules["zz_slow_exit"].slow = SlowExit()
    """,
}


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
def test_exit_with_a_daemon_thread_in_a_lifecore_call_is_clean(body):
    code = "import threading, time\nimport lifecore, lifecore.testing\n" + textwrap.dedent(body) + (
        "time.sleep(0.2)\nprint('exiting', flush=True)\n")
    for _ in range(3):  # the thread's timing varies: a crash showed on every run before the fix
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
        assert result.stdout == "exiting\n" and "terminate" not in result.stderr, result.stderr
