"""Sequence-session bookkeeping, measured side by side in one run (ratios, not absolutes).

1. Full lifecycles per second with 10,000 other sequences live: admit -> open -> a frame per
   page while extending page by page to 2,048 tokens -> complete -> release. lifecore from
   Python (one-call ``step`` and the primitives), the same loop in C++, the pure-Python
   reference model, and a plain free-list page allocator in Python.
2. One decode step of one sequence (acquire frame -> extend if needed -> commit), 16 tokens
   per page: lifecore from Python (``step`` and primitives), from C++, the model; vLLM's
   KVCacheManager only if it is already installed.
3. Host bookkeeping bytes per live sequence and per page (resident-set growth).

Run: python benchmarks/bench_sequence.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import subprocess
import sys
import time

from lifecore import _core
from lifecore.models import sequence_session as model
from lifecore.sequence import AdmissionCoordinator

TPP = 16
PAGE_BYTES = 4096
TARGET = 2048
LIVE = 10_000


def coordinator(live: int) -> AdmissionCoordinator:
    pages = (live + 64) * (TARGET // TPP)
    return AdmissionCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                max_active_sequences=live + 64)


def model_coordinator(live: int) -> model.ModelCoordinator:
    pages = (live + 64) * (TARGET // TPP)
    return model.ModelCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                  max_active_sequences=live + 64)


def best_of(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


# ---------------------------------------------------------------- lifecycles
def lifecore_lifecycles(n: int, live: int, primitives: bool) -> float:
    c = coordinator(live)
    others = []
    for i in range(live):
        adm = c.admit("live", TPP, TARGET)
        others.append((adm, adm.resources.open_session()))
    admit = c.admit
    start = time.perf_counter()
    for _ in range(n):
        adm = admit("r", TPP, TARGET)
        resources = adm.resources
        s = resources.open_session()
        if primitives:
            ensure, acquire = s.try_ensure_backing_covers, s.acquire_frame
            for t in range(TPP, TARGET + 1, TPP):
                ensure(t)
                acquire().commit()
        else:
            step = s.step
            for t in range(TPP, TARGET + 1, TPP):
                step(t)
        s.try_complete()
        s.close()
        resources.close()
    elapsed = time.perf_counter() - start
    assert c.capacity().active_sequences == live
    return elapsed / n


def cpp_lifecycles(n: int, live: int, primitives: bool) -> float:
    seconds, ops = _core._bench_sequence_lifecycles_cpp(n, live, TARGET, TPP, primitives)
    return seconds / ops


def model_lifecycles(n: int, live: int) -> float:
    c = model_coordinator(live)
    others = []
    for _ in range(live):
        adm = c.admit("live", TPP, TARGET)
        others.append(adm.resources.open_session())
    start = time.perf_counter()
    for _ in range(n):
        adm = c.admit("r", TPP, TARGET)
        s = adm.resources.open_session()
        for t in range(TPP, TARGET + 1, TPP):
            s.try_ensure_backing_covers(t)
            s.acquire_frame().commit()
        s.try_complete()
        s.close()
        adm.resources.close()
    elapsed = time.perf_counter() - start
    assert c.active == live
    return elapsed / n


def free_list_lifecycles(n: int, live: int) -> float:
    pages_per = TARGET // TPP
    free = list(range((live + 64) * pages_per))
    held = [[free.pop()] for _ in range(live)]
    pop, extend = free.pop, free.extend
    start = time.perf_counter()
    for _ in range(n):
        pages = [pop()]
        append = pages.append
        for _t in range(2 * TPP, TARGET + 1, TPP):
            append(pop())
        pages.reverse()
        extend(pages)
    elapsed = time.perf_counter() - start
    assert len(held) == live
    return elapsed / n


# ---------------------------------------------------------------- decode steps
def step_coordinator(n: int) -> AdmissionCoordinator:
    pages = n // TPP + 2
    return AdmissionCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                                max_active_sequences=4)


def lifecore_steps(n: int, primitives: bool) -> float:
    c = step_coordinator(n)
    adm = c.admit("r", 1, n + 1)
    s = adm.resources.open_session()
    if primitives:
        ensure, acquire = s.try_ensure_backing_covers, s.acquire_frame
        frontier = s.backing.tokens
        start = time.perf_counter()
        for t in range(1, n + 1):
            if t > frontier:  # extend if needed, a page at a time
                frontier = min(-(-t // TPP) * TPP, n + 1)
                ensure(frontier)
            acquire().commit()
        elapsed = time.perf_counter() - start
    else:
        step = s.step
        start = time.perf_counter()
        for t in range(1, n + 1):
            step(t)
        elapsed = time.perf_counter() - start
    s.close()
    return elapsed / n


def cpp_steps(n: int, primitives: bool) -> float:
    seconds, ops = _core._bench_sequence_steps_cpp(n, TPP, primitives)
    return seconds / ops


def model_steps(n: int) -> float:
    pages = n // TPP + 2
    c = model.ModelCoordinator(domains={"kv": pages * PAGE_BYTES}, page_bytes=PAGE_BYTES, tokens_per_page=TPP,
                               max_active_sequences=4)
    s = c.admit("r", 1, n + 1).resources.open_session()
    step = s.step
    start = time.perf_counter()
    for t in range(1, n + 1):
        step(t)
    return (time.perf_counter() - start) / n


def vllm_step() -> str:
    if importlib.util.find_spec("vllm") is None:
        return "not installed (not measured)"
    return "installed, but this benchmark does not drive it yet"


# ---------------------------------------------------------------- memory
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bookkeeping(live: int, pages_each: int) -> tuple[float, float]:
    gc.collect()
    c = coordinator(live)
    base = rss_bytes()
    kept = []
    for _ in range(live):
        adm = c.admit("r", TPP, TARGET)
        kept.append(adm.resources.open_session())
        adm.resources.close()  # keep only the session (it holds the resources)
    gc.collect()
    after_open = rss_bytes()
    for s in kept:
        for t in range(2 * TPP, (pages_each + 1) * TPP, TPP):
            s.step(t)
    gc.collect()
    after_pages = rss_bytes()
    per_sequence = (after_open - base) / live
    per_page = (after_pages - after_open) / (live * (pages_each - 1))
    for s in kept:
        s.close()
    return per_sequence, per_page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_only:
        per_seq, per_page = bookkeeping(LIVE, 32)
        print(f"{per_seq} {per_page}")
        return
    # Memory first, in a fresh process, so freed memory of other runs cannot hide growth.
    fresh = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-only"], capture_output=True,
                           text=True, check=True)
    per_seq, per_page = (float(x) for x in fresh.stdout.split())
    n_life = 100 if args.quick else 400
    n_steps = 200_000 if args.quick else 1_000_000
    repeats = 2 if args.quick else 3

    print(f"lifecycles: admit -> open -> frames extending page by page to {TARGET} tokens "
          f"({TARGET // TPP} pages) -> complete -> release, {LIVE:,} sequences live")
    py_step = best_of(lambda: lifecore_lifecycles(n_life, LIVE, primitives=False), repeats)
    py_prim = best_of(lambda: lifecore_lifecycles(n_life, LIVE, primitives=True), repeats)
    cpp = best_of(lambda: cpp_lifecycles(n_life * 2, LIVE, False), repeats)
    cpp_prim = best_of(lambda: cpp_lifecycles(n_life * 2, LIVE, True), repeats)
    mdl = best_of(lambda: model_lifecycles(max(20, n_life // 5), LIVE), repeats)
    fl = best_of(lambda: free_list_lifecycles(n_life * 2, LIVE), repeats)
    rows = [("lifecore from Python, step()", py_step), ("lifecore from Python, primitives", py_prim),
            ("lifecore C++ loop, step()", cpp), ("lifecore C++ loop, primitives", cpp_prim), ("pure-Python reference model", mdl), ("Python free-list allocator", fl)]
    for name, sec in rows:
        print(f"  {name:36s} {1 / sec:12,.0f} lifecycles/s  {sec * 1e6:9.1f} us each")
    print(f"  ratio lifecore(Python, step) / model: {mdl / py_step:6.1f}x faster (target >= 10x)")
    print(f"  ratio lifecore(Python, primitives) / model: {mdl / py_prim:6.1f}x faster")
    print(f"  ratio free list / lifecore(Python, step): lifecore is {py_step / fl:5.2f}x the free list's time")
    print(f"  ratio lifecore C++ / Python step(): {py_step / cpp:5.1f}x faster")

    print(f"\ndecode step of one sequence ({TPP} tokens per page): acquire frame -> extend if needed -> commit")
    s_py = best_of(lambda: lifecore_steps(n_steps, primitives=False), repeats)
    s_py_prim = best_of(lambda: lifecore_steps(n_steps, primitives=True), repeats)
    s_cpp = best_of(lambda: cpp_steps(n_steps * 5, primitives=False), repeats)
    s_cpp_prim = best_of(lambda: cpp_steps(n_steps * 5, primitives=True), repeats)
    s_mdl = best_of(lambda: model_steps(n_steps // 5), repeats)
    for name, sec, target in [("lifecore from Python, step() (1 call)", s_py, "< 1.5 us"),
                              ("lifecore from Python, primitives (3 calls)", s_py_prim, "< 1.5 us"),
                              ("lifecore C++, step()", s_cpp, "< 300 ns"),
                              ("lifecore C++, primitives", s_cpp_prim, "< 300 ns"),
                              ("pure-Python reference model, step()", s_mdl, "")]:
        print(f"  {name:44s} {sec * 1e9:9.0f} ns  {target}")
    print(f"  ratio model / lifecore(Python, step): {s_mdl / s_py:5.1f}x;  vLLM KVCacheManager: {vllm_step()}"
          " (reference figure for this machine class: 5.5-7.8 us per request and step)")

    sizes = _core._sequence_bookkeeping_sizes()
    print(f"\nhost bookkeeping (resident-set growth): {per_seq:,.0f} B per live sequence (session + resources + "
          f"1 page, Python objects included), {per_page:,.1f} B per additional page")
    print(f"  records (sizeof): {sizes}; a page extension adds one extent record per domain, a snapshot "
          f"per generation while held")


if __name__ == "__main__":
    main()
