"""A process forked from one that uses lifecore (a pre-fork server's workers, a DataLoader's):
what was opened before the fork is refused in the child with a ClosedError that says so, the
child exits without waiting for the parent's threads, a Device opened in the child works, and
the parent goes on as if nothing happened. Each case runs in a fresh interpreter, which forks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform has no fork()")

# The parent opens a device, a stream, a buffer, a graph and a coordinator on the device, forks,
# and waits for the child with a deadline (a child stuck at exit is the failure this guards).
PARENT = """
import os, sys, time, warnings
import numpy as np
import lifecore
from lifecore.errors import ClosedError
from lifecore.sequence import AdmissionCoordinator, Admitted

warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns of fork with threads
dev = lifecore.Device("mock")
st = dev.stream()
buf = st.alloc(64)
st.write(buf, np.arange(16, dtype=np.int32).tobytes())
graph = st.capture(lambda s: s.fill(buf, 7), warmup=0)
coordinator = AdmissionCoordinator(domains={"kv": 8 * 4096}, page_bytes=4096, tokens_per_page=16,
                                   max_active_sequences=4, device=dev)
admitted = coordinator.admit("held", 16, 32)
assert isinstance(admitted, Admitted)

def child():
{child}

pid = os.fork()
if pid == 0:
    child()
    sys.exit(0)  # an ordinary exit: the interpreter drops every object left
deadline = time.monotonic() + 30
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        print("CHILD HUNG")
        sys.exit(1)
    time.sleep(0.02)
print("child exit", os.waitstatus_to_exitcode(status))
# The parent goes on: its objects work, its graph replays, its coordinator admits.
assert bytes(st.read(buf)) == np.arange(16, dtype=np.int32).tobytes()
graph.replay()
assert np.frombuffer(bytes(st.read(buf)), dtype=np.int32).tolist() == [7] * 16
assert isinstance(coordinator.admit("after", 16, 32), Admitted)
assert dev.closed is False
dev.close()
print("parent ok")
"""


# For the scripts below that fork with a thread of their own running: waits for the child with
# a deadline, since a child stuck at a lock or at exit is the failure they guard against.
WAIT_FOR_CHILD = """
import os, time

def wait_for_child(pid):
    deadline = time.monotonic() + 30
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            print("CHILD HUNG")
            return
        time.sleep(0.02)
"""


def run_forking(child_body: str) -> list[str]:
    script = PARENT.replace("{child}", textwrap.indent(textwrap.dedent(child_body), "    "))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["child exit 0", "parent ok"], (done.stdout, done.stderr[-3000:])
    return lines[:-2]


def test_a_child_that_touches_nothing_exits_and_the_parent_goes_on():
    assert run_forking("pass") == []


def test_what_was_opened_before_the_fork_is_refused_in_the_child_saying_so():
    lines = run_forking("""
        checks = {
            "stream": lambda: dev.stream(),
            "alloc": lambda: st.alloc(16),
            "write": lambda: st.write(buf, bytes(64)),
            "read": lambda: st.read(buf),
            "sync": lambda: st.sync(),
            "replay": lambda: graph.replay(),
            "capture": lambda: st.begin_capture(),
        }
        for name, call in checks.items():
            try:
                call()
                print(name, "NOT REFUSED")
            except ClosedError as error:
                text = str(error)
                ok = f"opened in process {os.getppid()}, before this process forked" in text
                print(name, "refused" if ok else "refused without saying why: " + text)
        print("closed", dev.closed)
        dev.close()  # no wait, no release: the parent's
        graph.destroy()
    """)
    assert lines == ["stream refused", "alloc refused", "write refused", "read refused", "sync refused",
                     "replay refused", "capture refused", "closed True"]


def test_a_device_opened_in_the_child_works_beside_the_inherited_one():
    lines = run_forking("""
        own = lifecore.Device("mock")
        s = own.stream()
        b = s.alloc(16)
        s.write(b, bytes(range(16)))
        print("own", bytes(s.read(b)) == bytes(range(16)))
        own.close()
    """)
    assert lines == ["own True"]


def test_a_coordinator_on_an_inherited_device_refuses_and_its_holders_drop_quietly():
    lines = run_forking("""
        from lifecore.errors import ClosedError
        try:
            coordinator.admit("child", 16, 32)
            print("admit NOT REFUSED")
        except ClosedError as error:
            print("admit refused" if "before this process forked" in str(error) else str(error))
        admitted.resources.close()  # its pages are the parent's: given back to nothing here
        print("closed")
    """)
    assert lines == ["admit refused", "closed"]


def test_a_fork_context_process_gets_the_refusal_back_through_a_queue():
    script = textwrap.dedent("""
        import multiprocessing as mp, warnings
        import lifecore
        warnings.simplefilter("ignore", DeprecationWarning)

        def work(stream, buf, queue):
            try:
                stream.read(buf)
                queue.put("not refused")
            except Exception as error:  # sent back: a lifecore error pickles with its type
                queue.put(error)

        if __name__ == "__main__":
            dev = lifecore.Device("mock")
            st = dev.stream()
            buf = st.alloc(16)
            st.write(buf, bytes(16))
            context = mp.get_context("fork")
            queue = context.Queue()
            process = context.Process(target=work, args=(st, buf, queue))
            process.start()
            answer = queue.get(timeout=30)
            process.join(30)
            print(type(answer).__name__, process.exitcode)
            print(bytes(st.read(buf)) == bytes(16))
            dev.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["ClosedError 0", "True"], (done.stdout, done.stderr[-3000:])


@pytest.mark.parametrize("blocker", ["sync", "read"])
def test_a_fork_while_a_parent_thread_waits_inside_the_stream_is_refused_not_hung(blocker):
    """A parent thread holds the stream's lock through a wait on queued work as the process forks;
    the child's copy of that lock is never let go. The child's calls are refused before they take
    it, and dropping the stream's buffers waits for nothing."""
    script = textwrap.dedent(f"""
        import os, sys, threading, time, warnings
        import lifecore
        from lifecore.errors import ClosedError
        warnings.simplefilter("ignore", DeprecationWarning)

        dev = lifecore.Device("mock")
        st = dev.stream()
        buf = st.alloc(64)
        st.fill(buf, 1)
        dev._pause_streams_for(2.0)  # the fill stays queued: the wait below holds the lock
        st.fill(buf, 2)
        waiter = threading.Thread(target=lambda: st.{blocker}({"buf" if blocker == "read" else ""}))
        waiter.start()
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:
            for name, call in [("read", lambda: st.read(buf)), ("fill", lambda: st.fill(buf, 3)),
                               ("sync", lambda: st.sync()), ("sync_timeout", lambda: st.sync(timeout=1.0)),
                               ("alloc", lambda: st.alloc(16))]:
                began = time.monotonic()
                try:
                    call()
                    print(name, "NOT REFUSED")
                except ClosedError as error:
                    quick = time.monotonic() - began < 0.5
                    print(name, "refused" if quick and "before this process forked" in str(error) else str(error))
            del buf, st  # nothing may wait for the lock, run the parent's queued releases or call the driver
            import gc
            gc.collect()
            print("dropped")
            sys.exit(0)
        wait_for_child(pid)
        waiter.join()
        print("parent", bytes(st.read(buf))[:4] == (2).to_bytes(4, "little"))
        dev.close()
    """)
    done = subprocess.run([sys.executable, "-c", WAIT_FOR_CHILD + script], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["read refused", "fill refused", "sync refused", "sync_timeout refused",
                                        "alloc refused", "dropped", "parent True"], (done.stdout, done.stderr[-3000:])


def test_a_fork_while_a_parent_thread_closes_the_device_leaves_the_child_able_to_close_and_exit():
    script = textwrap.dedent('''
        import os, sys, threading, time, warnings
        import lifecore
        warnings.simplefilter("ignore", DeprecationWarning)

        dev = lifecore.Device("mock")
        st = dev.stream()
        buf = st.alloc(64)
        dev._pause_streams_for(2.0)
        st.fill(buf, 1)  # queued: the close below waits for it, holding the device's close lock
        closer = threading.Thread(target=dev.close)
        closer.start()
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:
            dev.close()  # nothing to close here, and the held lock is not taken
            print("child closed", dev.closed)
            del buf, st
            sys.exit(0)
        wait_for_child(pid)
        closer.join()
        print("parent closed", dev.closed)
    ''')
    done = subprocess.run([sys.executable, "-c", WAIT_FOR_CHILD + script], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["child closed True", "parent closed True"], (done.stdout, done.stderr[-3000:])


def test_the_childs_reports_of_inherited_objects_are_those_of_a_closed_device():
    lines = run_forking("""
        print("graph alive", graph.alive)
        print("stream", repr(st))
        for name, call in [("free", buf.free), ("memory_stats", dev.memory_stats)]:
            try:
                call()
                print(name, "NOT REFUSED")
            except ClosedError as error:
                print(name, "refused" if "before this process forked" in str(error) else str(error))
    """)
    assert lines == ["graph alive False", "stream Stream(StreamCaptureState(NO_CAPTURE))", "free refused",
                     "memory_stats refused"]
