#!/usr/bin/env bash
# Checks lifecore on a machine with an NVIDIA GPU, from a bare checkout and without network:
# the build environment, build and install, the backend tests, the stream state machine on cuda
# (hardware and software graphs), buffers as tensors both ways (out by DLPack and the CUDA array
# interface, in through launch / copy / fill), the device tests that otherwise run only inside
# the suite, the engine, a differential run against the mock, the benchmarks, and last the whole
# suite (a lighter Hypothesis profile, with a budget of its own that the steps before it cannot
# spend). Every step has its own time limit and all of them share a budget of 8 minutes
# (GPU_CHECK_BUDGET_S); a failing or missing step is reported (PASS / FAIL / TIMEOUT / SKIP),
# never fatal, and a summary ends the run. A step cut off by its limit gets SIGABRT first, so a
# Python process prints its stack (faulthandler) before it ends; a FAIL or TIMEOUT prints the
# last lines of the step's output. The run opens with the GPU, the commit and, once lifecore is
# installed, what lifecore says of its cuda backend: where that backend is unavailable, every
# step that needs it is skipped with the loader's reason; where it is available, a pytest step
# in which a test was skipped for want of a CUDA device (or every test named for cuda was) fails.
# Without network, pip needs the build dependencies installed already, or a folder of wheels
# named by WHEELHOUSE (used with --no-index).
# Results: ${OUT:-gpu_out}/gpu_check.log, steps.jsonl / steps.json (one record per step) and
# figures.json (benchmark figures, when produced), nothing else. Scratch (the tests' working
# folder, junit files, the suite's shard lists and logs) goes to ${GPU_CHECK_WORK:-a fresh
# temporary folder}, named at the end of the log.
# GPU_CHECK_STEPS=REGEX (the project's test of this script, or a rerun of some steps): only the
# steps whose names match the extended regular expression run, the others are recorded as
# skipped; without "install" among them, the lifecore that $PYTHON already imports is checked.
set -u
cd "$(dirname "$0")/.." || exit 1

OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu_check.log"
STEPS="$OUT/steps.jsonl"
# Tests write to their working folder (Hypothesis' folder, a machine's failure files): never OUT.
WORK="${GPU_CHECK_WORK:-$(mktemp -d -t gpu_check.XXXXXX)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
: >"$LOG"
: >"$STEPS"
# A folder used before keeps no figures, shard logs, junit files or failures that this run would
# take for its own.
rm -rf "$OUT/figures.json" "$OUT/steps.json" "$WORK"/driver_figures.json "$WORK"/suite_*.log "$WORK"/*.xml
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_ROOT_USER_ACTION=ignore
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 4)}"
# Output as it is written (a step cut off keeps what it printed), and a Python stack on SIGABRT,
# which is what a step past its limit gets first; no core file from that abort.
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
ulimit -c 0
# timeout exits 124 when it sent SIGABRT (the command ended of it or not), 137 when SIGKILL
# had to follow 5 s later; a command that aborts by itself before its limit exits 134 (FAIL).
TIMEOUT=(timeout --signal=ABRT --kill-after=5)
PYTHON="${PYTHON:-python3}"
TOTAL_BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
# The whole suite's own budget, kept back from every step before it.
SUITE_S="${GPU_CHECK_SUITE_S:-120}"
RESERVED_S=$SUITE_S
WHEELHOUSE="${WHEELHOUSE:-}"
PIP_SOURCE=()
if [ -n "$WHEELHOUSE" ]; then PIP_SOURCE=(--no-index --find-links "$WHEELHOUSE"); fi
START=$(date +%s)
LAST_STATUS=""
ONLY="${GPU_CHECK_STEPS:-}"

log() { printf '%s\n' "$*" | tee -a "$LOG"; }

# excerpt LINES: the last LINES lines of standard input, indented and cut to 300 characters,
# without pytest's list of skips or the frames of pytest's own machinery in a faulthandler stack
# (the test's frames are the ones that tell).
excerpt() {
  grep -vE '^(SKIPPED \[|  File "(.*/(_pytest|pluggy)/|<frozen runpy>))' | tail -n "$1" | cut -c 1-300 | sed 's/^/    | /'
}

# step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, never longer than what is left
# of the whole budget less RESERVED_S; its output goes to the log as it is written, and on a
# FAIL or TIMEOUT its last 30 lines to stdout too; records name, exit status and seconds in
# steps.jsonl and leaves the outcome in LAST_STATUS.
step() {
  local name="$1" limit="$2"
  shift 2
  local now left rc began ended mark
  if unselected "$name"; then return 0; fi
  if [ -n "${BLOCKED:-}" ]; then
    skip "$name" "$BLOCKED"
    return 0
  fi
  now=$(date +%s)
  left=$((TOTAL_BUDGET_S - RESERVED_S - (now - START)))
  if [ "$left" -lt "$limit" ]; then limit=$left; fi
  if [ "$limit" -lt 10 ]; then
    skip "$name" "time budget spent"
    return 0
  fi
  log ""
  log "=== $name (limit ${limit}s, $(date -u +%T))"
  mark=$(wc -c <"$LOG")
  began=$(date +%s)
  # timeout makes itself the leader of a process group (its pid, written first) that its
  # signal reaches whole. The command may end before the processes it started: a Python child
  # still writing its stack on SIGABRT, read here before it was whole. So a step cut off waits
  # for its group to empty, 5 s at most, and then ends what is left.
  "$BASH" -c 'printf "%s" "$$" >"$0" && exec "$@"' "$WORK/step.pid" "${TIMEOUT[@]}" "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  ended=$(date +%s)
  local status=passed verdict=PASS group waited
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timed_out verdict=TIMEOUT
    group=$(cat "$WORK/step.pid" 2>/dev/null)
    if [[ $group =~ ^[0-9]+$ ]]; then
      for ((waited = 0; waited < 50; waited++)); do
        kill -0 -- "-$group" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 -- "-$group" 2>/dev/null; then kill -KILL -- "-$group" 2>/dev/null; fi
    fi
  elif [ "$rc" -ne 0 ]; then status=failed verdict=FAIL; fi
  if [ "$verdict" != PASS ]; then
    echo "    its last lines (the whole output is in the log):"
    tail -c +$((mark + 1)) "$LOG" | excerpt 30
  fi
  log "=== $verdict: $name (exit $rc, $((ended - began))s)"
  printf '{"step": "%s", "status": "%s", "exit": %d, "seconds": %d}\n' "$name" "$status" "$rc" "$((ended - began))" >>"$STEPS"
  LAST_STATUS=$status
  return 0
}

# json_text TEXT: TEXT as the inside of a JSON string (a loader's reason may hold anything).
json_text() {
  local text="${1//\\/\\\\}"
  text="${text//\"/\\\"}"
  text="${text//[$'\n\r\t']/ }"
  printf '%s' "$text"
}

# skip NAME REASON: records a step that could not run here.
skip() {
  log "=== SKIP: $1 ($2)"
  printf '{"step": "%s", "status": "skipped", "reason": "%s"}\n' "$1" "$(json_text "$2")" >>"$STEPS"
  LAST_STATUS=skipped
}

has_pytest_marker() { grep -rqs "mark.$1" tests/; }

selected() { [ -z "$ONLY" ] || [[ $1 =~ $ONLY ]]; }
# unselected NAME: true, the step recorded as skipped, when GPU_CHECK_STEPS leaves it out (so
# the probes that choose how a step runs are spared too).
unselected() {
  if selected "$1"; then return 1; fi
  skip "$1" "not selected by GPU_CHECK_STEPS"
}

# no_device NAME: true, the step recorded as skipped, when lifecore is not installed or its cuda
# backend is unavailable here (NO_CUDA, the loader's reason, set once lifecore is installed).
no_device() {
  if [ -n "${BLOCKED:-}" ]; then
    skip "$1" "$BLOCKED"
  elif [ -n "${NO_CUDA:-}" ]; then
    skip "$1" "$NO_CUDA"
  else
    return 1
  fi
}

# device_step NAME LIMIT_S COMMAND...: a step that needs lifecore's cuda backend.
device_step() {
  if unselected "$1" || no_device "$1"; then return 0; fi
  step "$@"
}

# torch_has_cuda: whether torch here sees a CUDA device (asked once).
TORCH_CUDA=""
torch_has_cuda() {
  if [ -z "$TORCH_CUDA" ]; then
    TORCH_CUDA=no
    "${TIMEOUT[@]}" 60 "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1
    case $? in
      0) TORCH_CUDA=yes ;;
      124 | 137) log "torch did not say within 60s whether it sees a CUDA device: taken as no" ;;
    esac
  fi
  [ "$TORCH_CUDA" = yes ]
}

# The header: which GPU, which commit (the checkout may be a copy without git).
log "gpu_check started $(date -u '+%F %T') UTC"
if command -v nvidia-smi >/dev/null 2>&1; then
  "${TIMEOUT[@]}" 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
    head -n 8 | sed 's/^/gpu: /' | tee -a "$LOG"
else
  log "gpu: no nvidia-smi"
fi
log "commit: $("${TIMEOUT[@]}" 10 git rev-parse HEAD 2>/dev/null || echo no-git)"

step "environment" 60 bash -c "nvidia-smi || echo 'nvidia-smi not found'; $PYTHON --version; \
  $PYTHON -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.cuda.is_available())' || true; \
  $PYTHON -c 'import cupy; print(\"cupy\", cupy.__version__)' || true"

# The build needs these present (no network): from WHEELHOUSE when one is named.
BUILD_DEPS=(scikit-build-core nanobind numpy hypothesis pytest)
# cmake and ninja as Python packages only where the machine has neither the tool nor its package
# (a system cmake is not a pip requirement that a wheelhouse could satisfy); without ninja the
# build falls back to make, so ninja is asked for only where make is missing too.
if ! command -v cmake >/dev/null 2>&1 && ! "$PYTHON" -c 'import cmake' >/dev/null 2>&1; then BUILD_DEPS+=(cmake); fi
if ! command -v ninja >/dev/null 2>&1 && ! "$PYTHON" -c 'import ninja' >/dev/null 2>&1 && \
   ! command -v make >/dev/null 2>&1; then BUILD_DEPS+=(ninja); fi
if [ -n "$WHEELHOUSE" ]; then
  if [ -d "$WHEELHOUSE" ]; then
    step "build dependencies from the wheelhouse" 90 "$PYTHON" -m pip install -q ${PIP_SOURCE[@]+"${PIP_SOURCE[@]}"} "${BUILD_DEPS[@]}"
  else
    skip "build dependencies from the wheelhouse" "WHEELHOUSE=$WHEELHOUSE is not a folder"
  fi
fi
# scikit-build-core finds cmake on PATH or as the cmake Python package, which may be the only one.
# The compiler too: a toolchain that links libstdc++ statically (one such machine's CXX did) is
# what the extension's symbol test (tests/test_module_symbols.py) guards against.
step "build environment" 20 bash -c "\"\${CXX:-c++}\" --version | head -1; { cmake --version 2>/dev/null | head -1 | grep . || \
  $PYTHON -c 'import cmake; print(\"cmake (Python package)\", cmake.__version__)'; } && \
  { ninja --version 2>/dev/null | sed 's/^/ninja /' | grep . || $PYTHON -c 'import ninja; print(\"ninja (Python package)\")' 2>/dev/null || \
    make --version 2>/dev/null | head -1 | grep . ; } && \
  $PYTHON -c 'import scikit_build_core, nanobind, numpy, hypothesis, pytest; \
print(\"scikit-build-core\", scikit_build_core.__version__, \"nanobind\", nanobind.__version__, \"numpy\", numpy.__version__)'"
if unselected "install"; then
  :
elif [ "$LAST_STATUS" = passed ]; then
  step "install" "${GPU_CHECK_INSTALL_S:-180}" "$PYTHON" -m pip install --no-build-isolation --no-deps -q ${PIP_SOURCE[@]+"${PIP_SOURCE[@]}"} .
  if [ "$LAST_STATUS" != passed ]; then BLOCKED="lifecore did not install"; fi
else
  skip "install" "the build environment is incomplete (cmake, ninja or make, or a Python build dependency, is missing)"
  BLOCKED="lifecore is not installed"
fi

# What lifecore says of its cuda backend: where it is unavailable, the steps that need it are
# skipped with its reason (NO_CUDA); where it is available, the pytest steps check that no test
# was skipped for want of a CUDA device (CUDA_AVAILABLE).
NO_CUDA="" CUDA_AVAILABLE="" CUDA_LINE="not asked: ${BLOCKED:-}"
if [ -z "${BLOCKED:-}" ]; then
  CUDA_PROBE=$("${TIMEOUT[@]}" 60 "$PYTHON" -c "
import sys
import lifecore
info = lifecore.backend_info('cuda')
print(f'{info.name}: available={info.available} driver={info.driver_version} devices={info.device_count} '
      f'device={info.device_name!r} library={info.library!r} reason={info.reason!r}')
if not info.available:
    print(info.reason or 'no reason given')
    sys.exit(3)
" 2>&1)
  case $? in
    0) CUDA_AVAILABLE=1
       CUDA_LINE=$(printf '%s\n' "$CUDA_PROBE" | tail -n 1) ;;
    3) NO_CUDA="cuda unavailable: $(printf '%s\n' "$CUDA_PROBE" | tail -n 1)"
       CUDA_LINE=$(printf '%s\n' "$CUDA_PROBE" | tail -n 2 | head -n 1) ;;
    124 | 137) NO_CUDA="lifecore's cuda backend did not answer within 60s"
       CUDA_LINE="no answer within 60s" ;;
    *) NO_CUDA="lifecore's cuda backend could not be asked (see the log)"
       CUDA_LINE="the question failed" ;;
  esac
  log "cuda backend: $CUDA_LINE"
  if [ -z "$CUDA_AVAILABLE" ] && [[ $NO_CUDA != "cuda unavailable: "* ]]; then
    printf '%s\n' "$CUDA_PROBE" | excerpt 30 | tee -a "$LOG"
  fi
fi
export CUDA_AVAILABLE

step "backends" 20 "$PYTHON" -c "
import lifecore
from lifecore import _core
for info in lifecore.backends():
    print(f'{info.name}: available={info.available} driver={info.driver_version} devices={info.device_count} '
          f'device={info.device_name!r} library={info.library!r} reason={info.reason!r}')
for backend in lifecore.backend_names():
    try:
        table = _core._probe_symbols(backend)
    except lifecore.InvalidArgumentError:
        continue  # a backend without a vendor library has no symbol table
    print(backend, 'symbols resolved:', sum(table.values()), 'of', len(table),
          'missing:', [name for name, ok in table.items() if not ok])
try:
    print(_core._open_driver_probe('cuda'))
except lifecore.BackendUnavailableError as error:
    if lifecore.backend_info('cuda').available:
        raise
    print('cuda driver probe:', error)  # no device here: what the loader says is the finding
"

# Launch overhead at the driver level, measured side by side in one run: N tiny kernels
# launched eagerly vs the same N replayed as one captured graph.
device_step "driver launch figures" 60 "$PYTHON" - "$WORK/driver_figures.json" <<'PY'
import json, sys, time
from lifecore import _core

driver = _core._open_driver("cuda")
module = driver.module_load("builtin")
scale = driver.module_get_function(module, "scale_f32")
n = 256
x, y = driver.mem_alloc(4 * n), driver.mem_alloc(4 * n)
stream = driver.stream_create()
driver.memset_d32_async(x, 0x3F800000, n, stream)  # on the stream the kernels run on, so ordered before them
args = [("u32", n), ("f32", 1.0), ("pointer", x), ("pointer", y)]
figures = {"device": driver.device_name(), "driver_version": driver.driver_version(), "chains": []}
for kernels in (1, 8, 64, 256):
    def eager():
        for _ in range(kernels):
            driver.launch(scale, (1, 1, 1), (n, 1, 1), stream, args)
        driver.stream_synchronize(stream)
    eager()
    driver.begin_capture(stream, "thread_local")
    for _ in range(kernels):
        driver.launch(scale, (1, 1, 1), (n, 1, 1), stream, args)
    graph = driver.end_capture(stream)
    exec_ = driver.graph_instantiate(graph)
    driver.graph_upload(exec_, stream)
    def replay():
        driver.graph_launch(exec_, stream)
        driver.stream_synchronize(stream)
    replay()
    timings = {}
    for name, run in (("eager", eager), ("graph", replay)):
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(20):
                run()
            best = min(best, (time.perf_counter() - began) / 20)
        timings[name] = best * 1e6
    figures["chains"].append({"kernels": kernels, "eager_us": round(timings["eager"], 2),
                              "graph_us": round(timings["graph"], 2),
                              "speedup": round(timings["eager"] / timings["graph"], 2)})
    print(figures["chains"][-1])
    driver.graph_exec_destroy(exec_)
    driver.graph_destroy(graph)
driver.close()
json.dump(figures, open(sys.argv[1], "w"), indent=2)
PY

# Run from outside the checkout so the installed package (not the source tree) is imported.
TESTS="$(pwd)/tests"
# Where the cuda backend is available, a test skipped for want of a CUDA device (the reasons the
# tests give: "no CUDA device...", "torch has no CUDA", and "cuda: REASON" from the backend_name
# fixture), or a run in which every test named for cuda was skipped, is a failure: the device
# was there and the test did not use it.
cat >"$WORK/cuda_ran.py" <<'PY'
import re
import sys
import xml.etree.ElementTree as ET

NO_DEVICE = re.compile(r"^(no CUDA device|torch has no CUDA|cuda: )")
ran = skipped = 0
wrongly = []
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"cuda check: cannot read {path}: {error}")
        continue
    for case in root.iter("testcase"):
        name = case.get("name", "")
        skip = case.find("skipped")
        reason = skip.get("message", "") if skip is not None else ""
        if NO_DEVICE.match(reason):
            wrongly.append(f"{case.get('classname', '')}::{name}: {reason}")
        if "cuda" in name.lower():
            ran, skipped = (ran, skipped + 1) if skip is not None else (ran + 1, skipped)
print(f"cuda check: {ran} test(s) named for cuda ran, {skipped} skipped; "
      f"{len(wrongly)} skipped for want of a CUDA device")
for line in wrongly[:20]:
    print(f"  skipped although the cuda backend is available: {line}")
if wrongly or (skipped and not ran):
    print("cuda check: FAILED: the cuda backend is available here, yet "
          + ("tests were skipped for want of a CUDA device" if wrongly else "every test named for cuda was skipped"))
    sys.exit(1)
PY

# checked_pytest JUNIT ARGS...: pytest ARGS from WORK (its junit file JUNIT there); where the cuda
# backend is available, then the check above of JUNIT. -v names each test as it starts, so a step
# cut off by its limit shows which test was running; -rsfE lists skips, then failures and errors.
checked_pytest() {
  local junit="$1" rc
  shift
  cd "$WORK" || return 1
  rm -f "$junit"
  "$PYTHON" -m pytest -p no:cacheprovider -v -rsfE "$@" --junitxml="$junit"
  rc=$?
  if [ -n "$CUDA_AVAILABLE" ] && ! "$PYTHON" "$WORK/cuda_ran.py" "$junit" && [ "$rc" -eq 0 ]; then rc=1; fi
  return "$rc"
}
export -f checked_pytest
export WORK TESTS PYTHON

step "backend tests" 60 bash -c 'checked_pytest "$@"' - backend_tests.xml "$TESTS/test_backend_cuda.py" "$TESTS/test_backend_hip.py"

# The lighter derandomized profile without shrinking (gpu-check: 15 runs of 30 steps per graph
# mode): under the ci profile a mock run takes 2-3 s per mode, and a device synchronizes at every
# read; a failure is reported as found, where shrinking it could outlast the step's limit.
# 120 s: each example opens a Device("cuda") again (the primary context, the modules loaded).
if [ -f tests/test_stream_machine.py ]; then
  device_step "stream state machine on cuda" 120 env HYPOTHESIS_PROFILE=gpu-check bash -c 'checked_pytest "$@"' - \
    stream_machine.xml "$TESTS/test_stream_machine.py" -k cuda
else
  skip "stream state machine on cuda" "tests/test_stream_machine.py not in this checkout"
fi

# Buffers as tensors on cuda: torch.from_dlpack (with the consumer's stream), and CuPy through
# __cuda_array_interface__, each a zero-copy view (written through the view, read through the
# buffer, and the reverse). A missing torch or CuPy build with CUDA skips that half.
device_step "buffers as tensors on cuda" 60 "$PYTHON" - <<'PY'
import numpy as np
import lifecore

N = 1024
with lifecore.Device("cuda") as dev:
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.write(buf, np.arange(N, dtype=np.float32))
    assert buf.__dlpack_device__() == (2, 0), buf.__dlpack_device__()
    try:
        import torch
        cuda_torch = torch.cuda.is_available()
    except ImportError:
        cuda_torch = False
    if cuda_torch:
        t = torch.from_dlpack(buf.view(torch.float32, (32, 32)))  # torch passes its current stream
        assert t.is_cuda and t.data_ptr() == buf.ptr, (t.device, t.data_ptr(), buf.ptr)
        assert t[1, 2].item() == 34.0
        t.mul_(2.0)
        torch.cuda.synchronize()
        assert np.frombuffer(s.read(buf), np.float32)[5] == 10.0
        s.fill(buf, 0)
        s.sync()
        assert t.abs().sum().item() == 0.0
        del t
        print("torch.from_dlpack: zero-copy both ways")
    else:
        print("torch with CUDA not installed: torch half skipped")
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        cai = buf.view("float32").__cuda_array_interface__
        assert cai["data"][0] == buf.ptr and cai["typestr"] == "<f4" and cai["version"] == 3
        s.write(buf, np.ones(N, np.float32))
        a = cupy.asarray(buf.view("float32"))  # synchronizes with the interface's stream
        assert int(a.data.ptr) == buf.ptr
        assert float(a.sum()) == float(N)
        a += 1
        cupy.cuda.runtime.deviceSynchronize()
        assert np.frombuffer(s.read(buf), np.float32)[0] == 2.0
        del a
        print("cupy via __cuda_array_interface__: zero-copy both ways")
    else:
        print("cupy not installed: cupy half skipped")
    assert buf.views == 0
    buf.free()
PY

# Tensors in on cuda: launch, copy and fill take torch CUDA tensors and CuPy arrays (DLPack,
# and the CUDA array interface for an object that offers only that); a view of a buffer passed
# back in is that buffer; a graph holds the tensor it recorded; a host array is refused. Then
# the buffer goes out to torch and CuPy by DLPack with an explicit stream= and by the array
# interface. A missing torch or CuPy build with CUDA skips that half.
device_step "tensors in on cuda" 60 "$PYTHON" - <<'PY'
import gc
import weakref

import numpy as np
import lifecore
from lifecore import kernels as K

N = 1024
SEVEN = 0x40E00000  # float32 7.0
GRID, BLOCK = N // 256, 256
with lifecore.Device("cuda") as dev:
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.write(buf, np.arange(N, dtype=np.float32))
    ramp = np.arange(N, dtype=np.float32)
    try:
        s.fill(np.zeros(N, np.float32), 0)
        raise AssertionError("a host array was accepted on cuda")
    except lifecore.InvalidArgumentError as error:
        assert "lives on cpu" in str(error), error
    try:
        import torch
        cuda_torch = torch.cuda.is_available()
    except ImportError:
        cuda_torch = False
    if cuda_torch:
        t = torch.zeros(N, device="cuda")
        s.fill(t, SEVEN)
        s.sync()
        assert bool((t == 7.0).all()), t[:4]
        out = torch.empty(N, device="cuda")
        s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, buf, out])
        s.sync()
        assert np.array_equal(out.cpu().numpy(), 2 * ramp)
        s.copy(t, out)
        s.sync()
        assert np.array_equal(t.cpu().numpy(), 2 * ramp)
        # Overlapping copies are refused here too (the driver's copy there is undefined).
        try:
            s.copy(t, t)
            raise AssertionError("a copy of a tensor onto itself was accepted")
        except lifecore.InvalidArgumentError as error:
            assert "share memory" in str(error), error
        # write / read_into through DLPack with host tensors; a device tensor is no host memory.
        s.write(buf, torch.arange(N, dtype=torch.float32))
        back = torch.empty(N, dtype=torch.float32)
        s.read_into(buf.view("float32"), back)
        assert np.array_equal(back.numpy(), ramp)
        try:
            s.write(buf, t)
            raise AssertionError("a CUDA tensor was taken as host data")
        except lifecore.InvalidArgumentError as error:
            assert "in host memory" in str(error), error
        s.fill(t, -1)  # a word's bits, signed
        s.sync()
        assert bool((t.view(torch.int32) == -1).all())
        try:
            s.fill(t.view(32, 32).t(), 0)
            raise AssertionError("a strided tensor was accepted")
        except lifecore.InvalidArgumentError as error:
            assert "not C-contiguous" in str(error), error
        view = torch.from_dlpack(buf.view(torch.float32))  # a view of the buffer, passed back in
        s.launch(K.scale_f32, GRID, BLOCK, [N, 3.0, view, view])
        assert np.array_equal(np.frombuffer(s.read(buf), np.float32), 3 * ramp)
        del view
        held = torch.zeros(N, device="cuda")
        ref = weakref.ref(held)
        graph = s.capture(lambda st: st.fill(held, SEVEN))
        s.sync()  # the warmup's fill, before torch zeroes the tensor on its own stream
        held.zero_()
        torch.cuda.synchronize()
        del held
        gc.collect()
        assert ref() is not None, "the graph let go of its tensor"
        graph.replay()
        s.sync()
        assert bool((ref() == 7.0).all())
        graph.destroy()
        for _ in range(100):
            gc.collect()
            if ref() is None:
                break
        assert ref() is None, "destroying the graph kept its tensor"
        s.write(buf, ramp)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):  # DLPack with stream=: that stream waits for the buffer's
            out = torch.utils.dlpack.from_dlpack(buf.view(torch.float32).__dlpack__(stream=side.cuda_stream))
            total = float(out.sum())
        assert total == float(ramp.sum()), total
        del out
        cai = torch.as_tensor(buf.view("float32"), device="cuda")  # torch reads __cuda_array_interface__
        assert cai.data_ptr() == buf.ptr and float(cai[5]) == 5.0
        del cai
        # Inside torch.cuda.graph, DLPack's stream= would make torch record on its capturing
        # stream and this stream wait there, joining this stream to torch's capture: lifecore
        # refuses the call before torch's export, so torch's capture should end cleanly; what it
        # says is printed. Last in the torch half: a failed capture may leave torch's graph pool
        # behind.
        captured = torch.zeros(N, device="cuda")
        torch.cuda.synchronize()
        refusal = end = None
        try:
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                captured += 1
                try:
                    s.fill(captured, SEVEN)
                except lifecore.CaptureStateError as error:
                    refusal = str(error)
        except RuntimeError as error:
            end = str(error).splitlines()[0]
        print(f"inside torch.cuda.graph: {'refused' if refusal else 'NOT refused'}; torch's capture end: {end or 'ok'}")
        assert refusal and "join" in refusal, refusal
        s.fill(buf, 0)  # that capture is over: the stream is usable again
        assert not np.frombuffer(s.read(buf), np.float32).any()
        print("torch: launch / copy / fill into CUDA tensors, views recognised, graph holds; export with stream=; "
              "a call inside torch.cuda.graph refused")
    else:
        print("torch with CUDA not installed: torch half skipped")
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        a = cupy.zeros(N, dtype=cupy.float32)
        s.fill(a, SEVEN)
        s.sync()
        assert float(a.sum()) == 7.0 * N
        s.write(buf, ramp)
        s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, buf, a])
        s.sync()
        assert np.array_equal(cupy.asnumpy(a), 2 * ramp)

        class OnlyInterface:  # the CUDA array interface alone
            def __init__(self, array):
                self.__cuda_array_interface__ = array.__cuda_array_interface__

        b = cupy.zeros(N, dtype=cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()
        s.copy(OnlyInterface(b), a)
        s.sync()
        assert np.array_equal(cupy.asnumpy(b), 2 * ramp)
        # The interface's stream orders the work: a copy from an array CuPy fills on a side
        # stream waits for that fill (an event recorded there, waited for by the stream).
        producer = cupy.cuda.Stream(non_blocking=True)
        with producer:
            d = cupy.full(N, 3.0, dtype=cupy.float32)
            d *= 2.0
            # CuPy names its current stream unless CUPY_CUDA_ARRAY_INTERFACE_SYNC=0 (then None).
            assert OnlyInterface(d).__cuda_array_interface__.get("stream") in (None, producer.ptr)
            s.copy(buf, OnlyInterface(d))
        s.sync()
        assert np.frombuffer(s.read(buf), np.float32)[N - 1] == 6.0

        class Unknown:  # an address the driver does not know as device memory
            __cuda_array_interface__ = {"version": 3, "typestr": "<f4", "shape": (N,), "data": (4096, False),
                                        "strides": None, "stream": None}

        try:
            s.fill(Unknown(), 0)
            raise AssertionError("an address unknown to the driver was accepted")
        except lifecore.InvalidArgumentError as error:
            assert "not device memory" in str(error), error
        s.write(buf, ramp)  # queued on this stream: the export's stream= orders CuPy's read after it
        side = cupy.cuda.Stream(non_blocking=True)
        with side:  # DLPack with stream=: CuPy passes its current stream
            c = cupy.from_dlpack(buf.view("float32"))
            total = float(c.sum())
        assert int(c.data.ptr) == buf.ptr, (int(c.data.ptr), buf.ptr)
        assert total == float(ramp.sum()), (total, float(ramp.sum()))
        del c
        # Inside a CuPy capture, DLPack's stream= would make CuPy record on its capturing stream
        # and this stream wait there, joining it to CuPy's capture: lifecore asks the driver
        # about CuPy's current stream and refuses before the export, so CuPy's capture should
        # end cleanly; what it says is printed.
        capturing = cupy.cuda.Stream(non_blocking=True)
        target = cupy.zeros(N, dtype=cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()
        refusal = end = None
        with capturing:
            capturing.begin_capture()
            target += 1
            try:
                s.fill(target, SEVEN)
            except lifecore.CaptureStateError as error:
                refusal = str(error)
            try:
                capturing.end_capture()
            except Exception as error:  # noqa: BLE001 - printed: what CuPy's end says is the finding
                end = str(error).splitlines()[0]
        print(f"inside a CuPy capture: {'refused' if refusal else 'NOT refused'}; CuPy's capture end: {end or 'ok'}")
        assert refusal and "join" in refusal, refusal
        s.fill(buf, 0)  # the stream never joined anything
        assert not np.frombuffer(s.read(buf), np.float32).any()
        print("cupy: launch / copy / fill into CuPy arrays (DLPack and the array interface, its stream waited "
              "for, an unknown address refused); export with stream=; a call inside a CuPy capture refused")
    else:
        print("cupy not installed: cupy half skipped")
    assert buf.views == 0
    buf.free()
PY
# A write captured into a CUDA graph copies from pageable host memory (the stream's staging
# copy, which the graph keeps). The emulated device replays it; whether CUDA captures such a
# copy is what this step finds out: it prints the answer, and fails only on a wrong replay.
device_step "captured write on cuda" 30 "$PYTHON" - <<'PY'
import numpy as np
import lifecore
from lifecore import kernels as K

N = 1024
with lifecore.Device("cuda") as dev:
    s = dev.stream()
    x, out = s.alloc(4 * N), s.alloc(4 * N)
    payload = np.full(N, 7.0, np.float32).tobytes()

    def step(st):
        st.write(x, payload)
        st.launch(K.scale_f32, N // 256, 256, [N, 2.0, x, out])

    try:
        graph = s.capture(step)
    except lifecore.LifecoreError as error:
        print(f"a captured write from pageable memory is refused: {type(error).__name__}: {error}")
    else:
        s.fill(x, 0)
        s.fill(out, 0)
        graph.replay()
        got = np.frombuffer(s.read(out), np.float32)
        assert (got == 14.0).all(), got[:4]
        print("a captured write from pageable memory replays correctly")
        graph.destroy()
    s.fill(x, 0)  # the stream is usable either way
    s.sync()
PY
# A bounded sync polls cuStreamQuery: True once the stream is idle, False while work is queued
# (a timeout of 0 right after a large fill may still find it busy: printed, not asserted), and
# the stream stays usable after either answer.
device_step "bounded sync on cuda" 30 "$PYTHON" - <<'PY'
import time
import numpy as np
import lifecore

with lifecore.Device("cuda") as dev:
    s = dev.stream()
    big = s.alloc(1 << 28)
    for _ in range(4):
        s.fill(big, 3)
    start = time.perf_counter()
    at_once = s.sync(timeout=0)
    print(f"sync(timeout=0) right after 1 GiB of fills: {at_once} ({(time.perf_counter() - start) * 1e6:.0f} us)")
    start = time.perf_counter()
    assert s.sync(timeout=30) is True
    print(f"sync(timeout=30): True after {(time.perf_counter() - start) * 1e3:.2f} ms")
    small = s.alloc(4096)
    s.fill(small, 5)
    assert s.sync(timeout=30) is True
    assert (np.frombuffer(s.read(small), np.uint32) == 5).all()
    small.free()
    big.free()
PY
# Another library's capture: torch.cuda.graph records on a thread of its own (global mode, torch's
# default) while this thread makes lifecore's calls the driver forbids then in the thread's own
# mode: a new allocation, a first launch (module load, info upload), a bounded sync, a read, a
# run of writes (fence queries), a KV arena, frees. Each must succeed, and torch's graph must
# still end and replay right.
if unselected "another library's capture on cuda" || no_device "another library's capture on cuda"; then
  :
elif ! torch_has_cuda; then
  skip "another library's capture on cuda" "torch here has no CUDA (its capture is the other library's)"
else
  step "another library's capture on cuda" 90 "$PYTHON" - <<'PY'
import threading
import numpy as np
import torch
import lifecore
from lifecore import kernels as K
from lifecore.sequence import AdmissionCoordinator


def lifecore_calls(dev, s):
    buf = s.alloc(3 << 20)  # no pool slice holds it yet: a driver allocation
    s.fill(buf, 7)
    assert s.sync(timeout=30) is True
    assert (np.frombuffer(s.read(buf), np.uint32) == 7).all()
    n = 1024
    xs, ys = s.alloc(4 * n), s.alloc(4 * n)
    s.write(xs, np.ones(n, np.float32).tobytes())
    s.fill(ys, 0)
    # The first kernel launch on this device: the built-in module is loaded (or, lazily, its
    # function looked up) and new info words uploaded (an allocation, then a wait).
    s.launch(K.axpy_info_f32, n // 256, 256, [xs, ys], info=[n, K.float_bits(2.0)])
    assert (np.frombuffer(s.read(ys), np.float32) == 2.0).all()
    xs.free()
    ys.free()
    small = s.alloc(4096)
    for _ in range(200):    # staging copies wait for fences, which collecting queries
        s.write(small, b"\0" * 4096)
    s.sync()
    c = AdmissionCoordinator(dev, domains={"kv": 64 * 4096}, page_bytes=4096, tokens_per_page=16,
                             max_active_sequences=2)  # a KV arena: one exact driver allocation
    del c
    small.free()
    buf.free()
    dev.cleanup()           # the pool's frees


def during_torch_capture(calls):
    x = torch.ones(1 << 16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    recording, finish = threading.Event(), threading.Event()
    made, failures = [], []

    def torch_capture():
        try:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                (x * 3).sum()  # warm up outside the capture, as torch asks
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):  # capture_error_mode "global", torch's default
                made.append(x * 2)
                recording.set()
                finish.wait(30)
        except BaseException as error:  # reported below
            failures.append(error)
            recording.set()

    thread = threading.Thread(target=torch_capture)
    thread.start()
    assert recording.wait(30), "torch never began its capture"
    try:
        calls()
    finally:
        finish.set()
        thread.join(60)
    assert not failures, f"torch's capture failed: {failures[0]!r}"
    x.fill_(5)
    graph.replay()
    torch.cuda.synchronize()
    assert bool((made[0] == 10).all()), made[0][:4]


def in_a_fresh_thread(calls):
    # A thread that never used CUDA: no context was current on it before lifecore's calls (the
    # capture-mode switch around them is the thread's, made with no context current).
    errors = []

    def run():
        try:
            calls()
        except BaseException as error:  # reported below
            errors.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "lifecore's calls on a fresh thread did not finish"
    if errors:
        raise errors[0]


with lifecore.Device("cuda") as dev:
    s = dev.stream()
    during_torch_capture(lambda: lifecore_calls(dev, s))
    print("torch.cuda.graph recorded on another thread through lifecore's allocation, first launch, bounded "
          "sync, read, writes, KV arena and frees, then replayed right")
    during_torch_capture(lambda: in_a_fresh_thread(lambda: lifecore_calls(dev, dev.stream())))
    print("the same from a thread that had never used CUDA")
PY
fi
# A blocking stream's capture: CuPy's streams are blocking by default, and an operation on the
# legacy default stream (a synchronous copy) waits for every blocking stream, so it fails and
# invalidates that capture. lifecore's reads (Stream.read, read_into, a CPU export of a buffer)
# copy on their own non-blocking stream: they must leave CuPy's capture recording.
if unselected "a blocking stream's capture on cuda" || no_device "a blocking stream's capture on cuda"; then
  :
elif ! "$PYTHON" -c 'import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0' >/dev/null 2>&1; then
  skip "a blocking stream's capture on cuda" "CuPy with a CUDA device is not importable here"
else
  step "a blocking stream's capture on cuda" 60 "$PYTHON" - <<'PY'
import cupy
import numpy as np
import lifecore

blocking = cupy.cuda.Stream(non_blocking=False)
a = cupy.ones(4096, dtype=cupy.float32)
out = cupy.zeros(4096, dtype=cupy.float32)  # made before the capture: no allocation inside it
with blocking:
    cupy.multiply(a, 2, out=out)  # warm up outside the capture
blocking.synchronize()
with lifecore.Device("cuda") as dev:
    s = dev.stream()
    buf = s.alloc(1 << 16)
    s.fill(buf, 9)
    s.sync()
    blocking.begin_capture()
    try:
        with blocking:
            cupy.multiply(a, 3, out=out)
        got = np.frombuffer(s.read(buf), np.uint32)
        into = np.zeros(1 << 14, np.uint32)
        s.read_into(buf, into)
    finally:
        graph = blocking.end_capture()  # raises if lifecore's reads invalidated the capture
    assert (got == 9).all() and (into == 9).all()
    a.fill(2)
    graph.launch(blocking)
    blocking.synchronize()
    assert bool((out == 6).all()), out[:4]
    buf.free()
print("CuPy's capture on a blocking stream went on recording through lifecore's read and read_into, "
      "and replayed right")
PY
fi
# The device tests that otherwise run only inside the suite, so that they run even where the
# suite runs out of time: those named for cuda (the backend_name fixture's cuda, a test that needs
# a real device or torch's CUDA), the fake driver's module tests beside the real ones.
DEVICE_TESTS=()
for file in test_backend_cuda_modules.py test_capture_torch.py test_capture_numerics.py test_sequence_device.py \
  test_bench_graph_replay.py test_runtime_capture.py test_runtime_bad_input.py test_runtime_wedge.py \
  test_runtime_profile.py test_conformance.py test_registry_api.py test_sequence_machine.py; do
  if [ -f "tests/$file" ]; then DEVICE_TESTS+=("$TESTS/$file"); fi
done
if [ "${#DEVICE_TESTS[@]}" -gt 0 ]; then
  device_step "device tests on cuda" 120 env HYPOTHESIS_PROFILE=gpu-check bash -c 'checked_pytest "$@"' - \
    device_tests.xml "${DEVICE_TESTS[@]}" -k cuda
else
  skip "device tests on cuda" "none of the device tests is in this checkout"
fi

# The reference engine with graphs on: its tests (tokens against the plain implementation
# where the top-2 margin is clear), the demo, and the decode step replayed against eager and
# against torch.cuda.CUDAGraph at batch 8.
if unselected "engine with graphs on cuda" || no_device "engine with graphs on cuda"; then
  :
elif [ ! -f tests/test_engine.py ]; then
  skip "engine with graphs on cuda" "no engine in this checkout"
elif ! torch_has_cuda; then
  skip "engine with graphs on cuda" "torch here has no CUDA (the engine's graphs are torch's)"
else
  step "engine with graphs on cuda" 120 bash -c "checked_pytest engine.xml '$TESTS/test_engine.py' && \
    $PYTHON -m lifecore demo --device cuda --requests 64 --json && \
    $PYTHON -m lifecore.benchmarks.engine --gpu-step"
fi

# A divergence is printed (to the log): the differential run saves no file, and is run from WORK
# so that nothing it might write lands in the checkout.
FUZZ_HELP=""
if unselected "differential mock,cuda" || no_device "differential mock,cuda"; then
  :
elif FUZZ_HELP=$("${TIMEOUT[@]}" 60 "$PYTHON" -m lifecore fuzz --help 2>/dev/null) && grep -q -- "--differential" <<<"$FUZZ_HELP"; then
  step "differential mock,cuda" 60 bash -c 'cd "$WORK" && exec "$@"' - "$PYTHON" -m lifecore fuzz --differential mock,cuda \
    --examples 3 --steps 300 --seed 0
elif [ -f benchmarks/differential.py ]; then
  step "differential mock,cuda" 60 "$PYTHON" benchmarks/differential.py --backends mock,cuda --runs 3 --steps 300 --seed 0
elif has_pytest_marker differential; then
  step "differential mock,cuda" 60 bash -c 'checked_pytest "$@"' - differential.xml "$TESTS" -m differential
else
  skip "differential mock,cuda" "no differential runner in this checkout"
fi

BENCH_HELP="" BENCH_RC=1
if unselected "benchmarks" || no_device "benchmarks"; then
  :
elif BENCH_HELP=$("${TIMEOUT[@]}" 60 "$PYTHON" -m lifecore bench --help 2>/dev/null); BENCH_RC=$?
  [ "$BENCH_RC" -eq 0 ] && grep -q -- "--json" <<<"$BENCH_HELP"; then
  step "benchmarks" 60 "$PYTHON" -m lifecore bench --backend cuda --json "$OUT/figures.json"
elif [ "$BENCH_RC" -eq 0 ]; then
  step "benchmarks" 60 "$PYTHON" -m lifecore bench --backend cuda
elif ls benchmarks/*.py >/dev/null 2>&1; then
  for script in benchmarks/*.py; do
    case "$(basename "$script")" in differential.py|__init__.py) continue ;; esac
    step "benchmark $(basename "$script" .py)" 45 "$PYTHON" "$script"
  done
else
  skip "benchmarks" "no benchmarks in this checkout"
fi

# Last, with the budget kept for it (at least SUITE_S: all that is left): the whole suite but
# the files the steps above ran, with the lighter derandomized profile without shrinking
# (gpu-check: under the ci profile the suite alone takes longer than its budget, and one failure
# being shrunk could take the rest of it), its files dealt round-robin to
# GPU_CHECK_SUITE_SHARDS pytest processes that run at once (one core each). Where the cuda backend
# is available, the shards' junit files get the check of checked_pytest.
run_suite() {
  local shards="${GPU_CHECK_SUITE_SHARDS:-4}" i=0 rc=0 file
  local -a pids=() files=()
  for ((i = 0; i < shards; i++)); do : >"$WORK/suite_files_$i.txt"; done
  i=0
  for file in "$TESTS"/test_*.py; do
    case "${file##*/}" in test_backend_cuda.py | test_backend_hip.py | test_stream_machine.py | test_engine.py) continue ;; esac
    printf '%s\n' "$file" >>"$WORK/suite_files_$((i % shards)).txt"
    i=$((i + 1))
  done
  for ((i = 0; i < shards; i++)); do
    mapfile -t files <"$WORK/suite_files_$i.txt"
    [ "${#files[@]}" -gt 0 ] || continue
    (cd "$WORK" && HYPOTHESIS_PROFILE="$SUITE_PROFILE" exec "$PYTHON" -m pytest -p no:cacheprovider -v -rsfE \
      "${files[@]}" --junitxml="all_tests_$i.xml") >"$WORK/suite_$i.log" 2>&1 &
    pids[i]=$!
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[i]}"; then echo "--- shard $i: passed"; else rc=1; echo "--- shard $i: FAILED"; fi
  done
  if [ -n "$CUDA_AVAILABLE" ] && [ "${#pids[@]}" -gt 0 ] && ! "$PYTHON" "$WORK/cuda_ran.py" "$WORK"/all_tests_*.xml; then rc=1; fi
  return "$rc"
}
export -f run_suite
export SUITE_PROFILE="${GPU_CHECK_SUITE_PROFILE:-gpu-check}"
RESERVED_S=0
step "whole suite" "$TOTAL_BUDGET_S" bash -c run_suite
# The shards' output goes to the log after the step, so a suite cut off by its limit shows too.
for shard_log in "$WORK"/suite_*.log; do
  if [ -f "$shard_log" ]; then printf '\n--- %s\n' "${shard_log##*/}"; cat "$shard_log"; fi
done >>"$LOG"
# On a FAIL or TIMEOUT, for each shard that did not pass: its failures and its last line where
# pytest finished, else (cut off) its last lines.
if [ "$LAST_STATUS" = failed ] || [ "$LAST_STATUS" = timed_out ]; then
  for shard_log in "$WORK"/suite_*.log; do
    [ -f "$shard_log" ] || continue
    last=$(tail -n 1 "$shard_log")
    if [[ $last == *" passed"* && $last != *failed* && $last != *error* ]]; then continue; fi
    if [[ $last =~ ^=+\ .*\ in\ [0-9.]+s ]]; then
      echo "    ${shard_log##*/}, its failures:"
      { grep -E '^(FAILED|ERROR) ' "$shard_log" | head -n 12; printf '%s\n' "$last"; } | excerpt 13
    else
      echo "    ${shard_log##*/}, its last lines:"
      excerpt 15 <"$shard_log"
    fi
  done
fi

log ""
log "cuda backend: $CUDA_LINE"
# Collect the step records (and the benchmark figures, when a runner wrote them) into JSON.
"${TIMEOUT[@]}" 60 "$PYTHON" - "$OUT" "$WORK" <<'PY' | tee -a "$LOG"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
(out / "steps.json").write_text(json.dumps(steps, indent=2))
figures_path = out / "figures.json"
figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
if not isinstance(figures, dict):
    figures = {"benchmarks": figures}
driver_figures = pathlib.Path(sys.argv[2]) / "driver_figures.json"
if driver_figures.exists():
    figures["driver_launch"] = json.loads(driver_figures.read_text())
figures["steps"] = steps
figures_path.write_text(json.dumps(figures, indent=2))
verdicts = {"passed": "PASS", "failed": "FAIL", "timed_out": "TIMEOUT", "skipped": "SKIP"}
print()
print("summary:")
for s in steps:
    detail = f"{s['seconds']}s" if "seconds" in s else s.get("reason", "")
    detail = detail if len(detail) <= 110 else detail[:107] + "..."  # in full in steps.json
    print(f"  {verdicts.get(s['status'], s['status']):8} {s['step']}  ({detail})")
counts = {v: sum(1 for s in steps if verdicts.get(s["status"]) == v) for v in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
print("overall:", "FAIL" if counts["FAIL"] or counts["TIMEOUT"] else "PASS", "-",
      ", ".join(f"{n} {v}" for v, n in counts.items()))
PY
log "gpu_check finished in $(( $(date +%s) - START ))s; results in $OUT, scratch in $WORK"
exit 0
