/* A fake CUDA driver library, built only by the tests (tests/test_backend_cuda.py), so the
 * CUDA loader can be checked on machines without a GPU. It exports what a real libcuda.so.1
 * exports first (cuGetProcAddress_v2 and a few bootstrap calls); every other entry point is
 * reachable only through cuGetProcAddress_v2, by base name and minimum ABI version, unless the
 * library is built with -DFAKE_EXPORT_VERSIONED, which also exports each entry point under its
 * versioned name (cuMemAlloc_v2, ...) for the dlsym fallback.
 *
 * Behaviour, chosen by environment variables:
 *   FAKE_CUDA_LOG=path        append "name version flags" for every cuGetProcAddress_v2 call
 *   FAKE_CUDA_VERSION=n       what cuDriverGetVersion reports (default 12040); cuGetProcAddress_v2
 *                             refuses a request for a newer version (CUDA_ERROR_INVALID_VALUE)
 *   FAKE_CUDA_INIT=code       what cuInit returns (default 0)
 *   FAKE_CUDA_DEVICES=n       what cuDeviceGetCount reports (default 1)
 *   FAKE_CUDA_HIDE=a,b        base names cuGetProcAddress_v2 does not know
 *   FAKE_CUDA_PROC=none       cuGetProcAddress_v2 knows nothing (only versioned exports remain)
 *   FAKE_CUDA_OOM=1           cuMemAlloc_v2 fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_INVALIDATE=1    cuStreamEndCapture reports an invalidated capture
 *   FAKE_CUDA_MEM_NODES=n     captured graphs hold n memory-alloc nodes besides one kernel node
 *   FAKE_CUDA_DEVICE_GET=code what cuDeviceGet returns for an ordinal in range (default 0)
 *   FAKE_CUDA_POINTER_ORDINAL=n  the device cuPointerGetAttribute names for known memory (default 0)
 *   FAKE_CUDA_SYNC=code       what cuStreamSynchronize returns (default 0); fake_cuda_stream_syncs()
 *                             counts its calls
 *   FAKE_CUDA_FAIL=cuA=code,cuB=code  those entry points (base names) fail with those codes
 *   FAKE_CUDA_BUSY=1          cuStreamQuery and cuEventQuery answer CUDA_ERROR_NOT_READY, as for
 *                             work still running, until fake_cuda_set_busy(0); cuStreamSynchronize
 *                             still returns at once
 * fake_cuda_live_events() (exported, not a CUDA entry point) counts the events created and not
 * yet destroyed, so a test can load the library again with ctypes and check for leaks;
 * fake_cuda_timed_events() counts those created with timing (without CU_EVENT_DISABLE_TIMING).
 * cuPointerGetAttribute knows the live ranges of cuMemAlloc / cuMemAllocAsync and those a test
 * hands it with fake_cuda_register(pointer, bytes) (another library's allocation, say); any
 * other address is CUDA_ERROR_INVALID_VALUE, as a host pointer is to a real driver.
 * fake_cuda_set_foreign_capture(stream, answer) gives another library's stream a capture state
 * (see there); fake_cuda_capture_queries() counts cuStreamGetCaptureInfo calls.
 * fake_cuda_event_records() / fake_cuda_last_record_stream() count cuEventRecord calls and name
 * the stream of the last one, as fake_cuda_stream_waits() / fake_cuda_last_wait_stream() do
 * for cuStreamWaitEvent.
 * cuModuleLoadDataEx and cuMemFree refuse, as CUDA does, while a capture is live and the
 * calling thread's capture mode is not relaxed (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and
 * invalidate the live captures; cuCtxSynchronize does so while a capture is live in any mode.
 * "Device memory" is host memory, so copies and memsets really move bytes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_ranges.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NO_DEVICE = 100, INVALID_PTX = 218,
  INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600, CAPTURE_UNSUPPORTED = 900, CAPTURE_UNMATCHED = 903,
  CAPTURE_INVALIDATED = 901
};
enum { CU_EVENT_DISABLE_TIMING = 0x2 };

static int env_int(const char* name, int fallback) {
  const char* value = getenv(name);
  return value && *value ? atoi(value) : fallback;
}

static int listed(const char* list_env, const char* name) {
  const char* list = getenv(list_env);
  if (!list) return 0;
  size_t length = strlen(name);
  for (const char* p = list; *p;) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == length && strncmp(p, name, n) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* FAKE_CUDA_FAIL=cuName=code,...: each named entry point (by base name) fails with that code,
 * read at every call, so a scenario can make one call of a multi-call operation fail. */
static CUresult injected(const char* name) {
  const char* list = getenv("FAKE_CUDA_FAIL");
  if (!list) return SUCCESS;
  size_t length = strlen(name);
  for (const char* p = list; *p;) {
    const char* end = strchr(p, ',');
    const char* eq = strchr(p, '=');
    if (eq && (!end || eq < end) && (size_t)(eq - p) == length && strncmp(p, name, length) == 0) return atoi(eq + 1);
    if (!end) break;
    p = end + 1;
  }
  return SUCCESS;
}
/* In fake_cuX, __func__ + 5 is the entry point's base name cuX. */
#define INJECT()                                   \
  do {                                             \
    CUresult injected_status = injected(__func__ + 5); \
    if (injected_status != SUCCESS) return injected_status; \
  } while (0)

/* ---- errors ---- */
static const struct { int code; const char* name; const char* text; } errors[] = {
    {SUCCESS, "CUDA_SUCCESS", "no error"},
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "fake driver: invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "fake driver: out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "fake driver: initialization error"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "fake driver: no CUDA-capable device is detected"},
    {INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "fake driver: a PTX JIT compilation failed"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "fake driver: named symbol not found"},
    {CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "fake driver: operation not permitted when stream is capturing"},
    {CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "fake driver: capture invalidated"},
    {CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "fake driver: capture unmatched"},
};

EXPORT CUresult cuGetErrorName(CUresult error, const char** out) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == error) { *out = errors[i].name; return SUCCESS; }
  *out = NULL;
  return INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult error, const char** out) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == error) { *out = errors[i].text; return SUCCESS; }
  *out = NULL;
  return INVALID_VALUE;
}

/* ---- bootstrap ---- */
EXPORT CUresult cuInit(unsigned flags) { (void)flags; return env_int("FAKE_CUDA_INIT", 0); }
EXPORT CUresult cuDriverGetVersion(int* version) { *version = env_int("FAKE_CUDA_VERSION", 12040); return SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int* count) { *count = env_int("FAKE_CUDA_DEVICES", 1); return SUCCESS; }

/* ---- device and context ---- */
static int the_context;
static __thread void* current_context;
static CUresult fake_cuDeviceGet(int* device, int ordinal) { INJECT();
  if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1)) return 101;
  if (env_int("FAKE_CUDA_DEVICE_GET", 0)) return env_int("FAKE_CUDA_DEVICE_GET", 0);
  *device = ordinal;
  return SUCCESS;
}
static CUresult fake_cuDeviceGetName(char* name, int length, int device) { INJECT();
  snprintf(name, (size_t)length, "Fake CUDA Device %d", device);
  return SUCCESS;
}
/* fake_cuda_primary_retains() (exported, not a CUDA entry point): retains not yet released. */
static long primary_retains;
EXPORT long fake_cuda_primary_retains(void) { return __atomic_load_n(&primary_retains, __ATOMIC_SEQ_CST); }
static CUresult fake_cuDevicePrimaryCtxRetain(void** context, int device) {
  INJECT();
  (void)device;
  *context = &the_context;
  __atomic_add_fetch(&primary_retains, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static CUresult fake_cuDevicePrimaryCtxRelease(int device) {
  INJECT();
  (void)device;
  __atomic_sub_fetch(&primary_retains, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
/* fake_cuda_current_context / fake_cuda_make_current (exported, not CUDA entry points): the
 * calling thread's current context, as another library on the thread would see and set it. */
EXPORT void* fake_cuda_current_context(void) { return current_context; }
EXPORT void fake_cuda_make_current(void* context) { current_context = context; }
static CUresult fake_cuCtxGetCurrent(void** context) { INJECT(); *context = current_context; return SUCCESS; }
static CUresult fake_cuCtxSetCurrent(void* context) { INJECT(); current_context = context; return SUCCESS; }
static CUresult fake_cuMemGetInfo(size_t* free_bytes, size_t* total) { INJECT(); *free_bytes = 1u << 30; *total = 2u << 30; return SUCCESS; }

/* ---- streams and events ---- */
/* began_on: the thread that began a capture outside relaxed mode, the only one CUDA lets end it. */
struct stream { int capturing; unsigned long long capture_id; uintptr_t joined; int relaxed; pthread_t began_on; };
static unsigned long long next_capture_id = 1;
/* An unsafe call (a module load) while a capture is live and the calling thread's mode is not
 * relaxed fails, as CUDA's, and invalidates every live capture: those begun before it. */
static long live_captures;
EXPORT long fake_cuda_live_captures(void) { return __atomic_load_n(&live_captures, __ATOMIC_SEQ_CST); }
static unsigned long long invalidated_before;
static __thread int capture_mode; /* the thread's: 0 global, 1 thread-local, 2 relaxed */
static void invalidate_live_captures(void) { invalidated_before = next_capture_id; }
static CUresult check_unsafe_call(void) {
  if (__atomic_load_n(&live_captures, __ATOMIC_SEQ_CST) == 0 || capture_mode == 2) return SUCCESS;
  invalidate_live_captures();
  return CAPTURE_UNSUPPORTED;
}
/* As CUDA's: synchronizing the context while any capture in it is live necessarily conflicts with
 * that capture, whatever the capture modes: it fails and invalidates every live capture. */
static CUresult fake_cuCtxSynchronize(void) { INJECT();
  if (__atomic_load_n(&live_captures, __ATOMIC_SEQ_CST) > 0) {
    invalidate_live_captures();
    return CAPTURE_UNSUPPORTED;
  }
  return current_context ? SUCCESS : 201;
}
/* The streams the fake made (so a capture query can tell them from another library's, which it
 * never dereferences), and the capture state a test gives another library's stream with
 * fake_cuda_set_foreign_capture(stream, answer): 0 none, 1 active, 2 invalidated, or a status
 * (>= 100) the query returns, as 906 for the legacy stream while a blocking stream captures. */
struct stream_entry { uintptr_t stream; int answer; struct stream_entry* next; };
static struct stream_entry* own_streams;
static struct stream_entry* foreign_captures;
static pthread_mutex_t streams_mutex = PTHREAD_MUTEX_INITIALIZER;
static void stream_entry_set(struct stream_entry** list, uintptr_t stream, int answer) {
  pthread_mutex_lock(&streams_mutex);
  struct stream_entry* e = *list;
  while (e && e->stream != stream) e = e->next;
  if (!e && (e = calloc(1, sizeof *e))) {
    e->stream = stream;
    e->next = *list;
    *list = e;
  }
  if (e) e->answer = answer;
  pthread_mutex_unlock(&streams_mutex);
}
static void stream_entry_forget(struct stream_entry** list, uintptr_t stream) {
  pthread_mutex_lock(&streams_mutex);
  for (struct stream_entry** at = list; *at; at = &(*at)->next)
    if ((*at)->stream == stream) {
      struct stream_entry* gone = *at;
      *at = gone->next;
      free(gone);
      break;
    }
  pthread_mutex_unlock(&streams_mutex);
}
/* -1 when the stream is not on the list. */
static int stream_entry_answer(struct stream_entry* const* list, uintptr_t stream) {
  int answer = -1;
  pthread_mutex_lock(&streams_mutex);
  for (struct stream_entry* e = *list; e; e = e->next)
    if (e->stream == stream) { answer = e->answer; break; }
  pthread_mutex_unlock(&streams_mutex);
  return answer;
}
EXPORT void fake_cuda_set_foreign_capture(unsigned long long stream, int answer) {
  stream_entry_set(&foreign_captures, (uintptr_t)stream, answer);
  if (answer != 0) return;
  /* That capture ended: the streams that joined it are no longer captured. */
  pthread_mutex_lock(&streams_mutex);
  for (struct stream_entry* e = own_streams; e; e = e->next) {
    struct stream* s = (struct stream*)e->stream;
    if (s->joined == (uintptr_t)stream) {
      s->joined = 0;
      s->capturing = 0;
    }
  }
  pthread_mutex_unlock(&streams_mutex);
}
/* fake_cuda_join_capture(consumer, producer): what an event recorded on `producer` and waited
 * for on `consumer` does when another library captures `producer` (as torch's __dlpack__ does
 * inside torch.cuda.graph): the consumer, one of the fake's streams, joins that capture. */
EXPORT void fake_cuda_join_capture(unsigned long long consumer, unsigned long long producer) {
  if (stream_entry_answer(&foreign_captures, (uintptr_t)producer) != 1) return;
  if (stream_entry_answer(&own_streams, (uintptr_t)consumer) < 0) return;
  struct stream* s = (struct stream*)(uintptr_t)consumer;
  pthread_mutex_lock(&streams_mutex);
  s->capturing = 1;
  s->capture_id = 1000 + producer;
  s->joined = (uintptr_t)producer;
  pthread_mutex_unlock(&streams_mutex);
}
static long capture_queries;
/* fake_cuda_capture_queries() (not a CUDA entry point): how many cuStreamGetCaptureInfo calls there were. */
EXPORT long fake_cuda_capture_queries(void) { return __atomic_load_n(&capture_queries, __ATOMIC_SEQ_CST); }
static CUresult fake_cuStreamCreate(struct stream** out, unsigned flags) { INJECT();
  (void)flags;
  *out = calloc(1, sizeof(struct stream));
  if (!*out) return OUT_OF_MEMORY;
  stream_entry_set(&own_streams, (uintptr_t)*out, 0);
  if (stream_entry_answer(&own_streams, (uintptr_t)*out) < 0) {  /* the registry could not grow */
    free(*out);
    *out = NULL;
    return OUT_OF_MEMORY;
  }
  return SUCCESS;
}
static CUresult fake_cuStreamDestroy(struct stream* s) { INJECT();
  if (s->capturing && !s->joined) __atomic_sub_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);
  stream_entry_forget(&own_streams, (uintptr_t)s);
  free(s);
  return SUCCESS;
}
static long stream_syncs;
EXPORT long fake_cuda_stream_syncs(void) { return __atomic_load_n(&stream_syncs, __ATOMIC_SEQ_CST); }
static CUresult fake_cuStreamSynchronize(struct stream* s) {
  INJECT();
  (void)s;
  __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_SEQ_CST);
  return env_int("FAKE_CUDA_SYNC", 0);
}
/* Whether queries find work still running: FAKE_CUDA_BUSY at the first query, then what
 * fake_cuda_set_busy says. Each query is counted (fake_cuda_stream_queries / _event_queries). */
static int busy = -1;
EXPORT void fake_cuda_set_busy(int value) { __atomic_store_n(&busy, value ? 1 : 0, __ATOMIC_SEQ_CST); }
static CUresult busy_until(long* queries) {
  __atomic_add_fetch(queries, 1, __ATOMIC_SEQ_CST);
  int expected = -1;
  __atomic_compare_exchange_n(&busy, &expected, env_int("FAKE_CUDA_BUSY", 0) ? 1 : 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&busy, __ATOMIC_SEQ_CST) ? NOT_READY : SUCCESS;
}
static long stream_queries, event_queries;
EXPORT long fake_cuda_stream_queries(void) { return __atomic_load_n(&stream_queries, __ATOMIC_SEQ_CST); }
EXPORT long fake_cuda_event_queries(void) { return __atomic_load_n(&event_queries, __ATOMIC_SEQ_CST); }
static CUresult fake_cuStreamQuery(struct stream* s) { INJECT(); (void)s; return busy_until(&stream_queries); }
static long live_events, timed_events;
EXPORT long fake_cuda_live_events(void) { return __atomic_load_n(&live_events, __ATOMIC_SEQ_CST); }
/* Events created with timing: those lifecore creates only to order work have none. */
EXPORT long fake_cuda_timed_events(void) { return __atomic_load_n(&timed_events, __ATOMIC_SEQ_CST); }
static CUresult fake_cuEventCreate(void** out, unsigned flags) { INJECT();
  unsigned* event = malloc(sizeof(unsigned));
  if (!event) return OUT_OF_MEMORY;
  *event = flags;
  *out = event;
  __atomic_add_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
  if (!(flags & CU_EVENT_DISABLE_TIMING)) __atomic_add_fetch(&timed_events, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static CUresult fake_cuEventDestroy(void* e) { INJECT();
  free(e);
  __atomic_sub_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static long event_records;
static unsigned long long last_record_stream;
EXPORT long fake_cuda_event_records(void) { return __atomic_load_n(&event_records, __ATOMIC_SEQ_CST); }
EXPORT unsigned long long fake_cuda_last_record_stream(void) { return __atomic_load_n(&last_record_stream, __ATOMIC_SEQ_CST); }
/* The stream is never dereferenced: it may be another library's (or 1, 2: the default streams). */
static CUresult fake_cuEventRecord(void* e, struct stream* s) { INJECT();
  (void)e;
  __atomic_store_n(&last_record_stream, (unsigned long long)(uintptr_t)s, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&event_records, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static CUresult fake_cuEventSynchronize(void* e) { INJECT(); (void)e; return SUCCESS; }
static CUresult fake_cuEventQuery(void* e) { INJECT(); (void)e; return busy_until(&event_queries); }
static CUresult fake_cuEventElapsedTime(float* ms, void* a, void* b) { INJECT();
  /* As CUDA: an event created without timing measures nothing. */
  if ((*(unsigned*)a | *(unsigned*)b) & CU_EVENT_DISABLE_TIMING) return INVALID_HANDLE;
  *ms = 0.5f;
  return SUCCESS;
}

/* ---- memory: host memory posing as device memory ---- */
/* The ranges cuPointerGetAttribute knows: its allocations and those a test registers. */
EXPORT void fake_cuda_register(CUdeviceptr base, size_t bytes) { fake_ranges_add((uintptr_t)base, bytes); }
static CUresult fake_cuMemAlloc(CUdeviceptr* out, size_t bytes) { INJECT();
  if (env_int("FAKE_CUDA_OOM", 0)) return OUT_OF_MEMORY;
  *out = (CUdeviceptr)(uintptr_t)calloc(1, bytes ? bytes : 1);
  fake_cuda_register(*out, bytes);
  return SUCCESS;
}
static CUresult release_range(CUdeviceptr p) { fake_ranges_forget((uintptr_t)p); free((void*)(uintptr_t)p); return SUCCESS; }
/* A free, like a module load, is a potentially unsafe call (see check_unsafe_call). */
static CUresult fake_cuMemFree(CUdeviceptr p) { INJECT();
  CUresult refused = check_unsafe_call();
  return refused != SUCCESS ? refused : release_range(p);
}
enum { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };
static CUresult fake_cuPointerGetAttribute(void* data, int attribute, CUdeviceptr p) { INJECT();
  if (attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL || !fake_ranges_contain((uintptr_t)p)) return INVALID_VALUE;
  *(int*)data = env_int("FAKE_CUDA_POINTER_ORDINAL", 0);
  return SUCCESS;
}
static CUresult fake_cuMemAllocAsync(CUdeviceptr* out, size_t bytes, struct stream* s) { INJECT(); (void)s; return fake_cuMemAlloc(out, bytes); }
static CUresult fake_cuMemFreeAsync(CUdeviceptr p, struct stream* s) { INJECT(); (void)s; return release_range(p); }
static CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) { INJECT(); memcpy((void*)(uintptr_t)dst, src, n); return SUCCESS; }
static CUresult fake_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) { INJECT(); memcpy(dst, (void*)(uintptr_t)src, n); return SUCCESS; }
static CUresult fake_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { INJECT(); memmove((void*)(uintptr_t)dst, (void*)(uintptr_t)src, n); return SUCCESS; }
static CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, struct stream* st) { INJECT(); (void)st; return fake_cuMemcpyHtoD(d, s, n); }
static CUresult fake_cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, struct stream* st) { INJECT(); (void)st; return fake_cuMemcpyDtoH(d, s, n); }
static CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, struct stream* st) { INJECT(); (void)st; return fake_cuMemcpyDtoD(d, s, n); }
static CUresult fake_cuMemsetD32(CUdeviceptr dst, unsigned value, size_t count) { INJECT();
  unsigned* p = (unsigned*)(uintptr_t)dst;
  for (size_t i = 0; i < count; ++i) p[i] = value;
  return SUCCESS;
}
static CUresult fake_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, struct stream* s) { INJECT(); (void)s; return fake_cuMemsetD32(d, v, n); }

/* ---- modules: a PTX "JIT" that only reads the entry signatures ---- */
struct function { char name[64]; size_t param_sizes[16]; size_t param_count; };
struct module { struct function functions[16]; size_t count; };
static CUresult fake_cuModuleLoadDataEx(struct module** out, const void* image, unsigned n, int* options, void** values) { INJECT();
  const char* text = image;
  CUresult unsafe = check_unsafe_call();
  if (unsafe != SUCCESS) return unsafe;
  if (!strstr(text, ".version") || !strstr(text, ".entry")) {
    for (unsigned i = 0; i < n; ++i)
      if (options[i] == 5) { /* CU_JIT_ERROR_LOG_BUFFER */
        size_t size = 0;
        for (unsigned j = 0; j < n; ++j) if (options[j] == 6) size = (size_t)(uintptr_t)values[j];
        if (size) snprintf(values[i], size, "ptxas fatal   : fake parse error: no .version or .entry");
      }
    return INVALID_PTX;
  }
  struct module* m = calloc(1, sizeof *m);
  for (const char* p = strstr(text, ".entry"); p && m->count < 16; p = strstr(p + 1, ".entry")) {
    struct function* f = &m->functions[m->count++];
    p += 6;
    while (*p == ' ') ++p;
    size_t k = 0;
    while (*p && *p != '(' && *p != ' ' && k < sizeof f->name - 1) f->name[k++] = *p++;
    const char* close = strchr(p, ')');
    for (const char* q = strstr(p, ".param"); q && q < close && f->param_count < 16; q = strstr(q + 1, ".param")) {
      const char* type = q + 6;
      while (*type == ' ') ++type;
      f->param_sizes[f->param_count++] = (strncmp(type, ".u64", 4) == 0 || strncmp(type, ".f64", 4) == 0 ||
                                          strncmp(type, ".s64", 4) == 0 || strncmp(type, ".b64", 4) == 0) ? 8 : 4;
    }
  }
  *out = m;
  return SUCCESS;
}
static int module_unloads;  /* read by tests through fake_cuda_module_unloads */
EXPORT int fake_cuda_module_unloads(void) { return module_unloads; }
static CUresult fake_cuModuleUnload(struct module* m) { INJECT(); free(m); ++module_unloads; return SUCCESS; }
static CUresult fake_cuModuleGetFunction(struct function** out, struct module* m, const char* name) { INJECT();
  for (size_t i = 0; i < m->count; ++i)
    if (strcmp(m->functions[i].name, name) == 0) { *out = &m->functions[i]; return SUCCESS; }
  return NOT_FOUND;
}
static CUresult fake_cuFuncGetParamInfo(struct function* f, size_t index, size_t* offset, size_t* size) { INJECT();
  if (index >= f->param_count) return INVALID_VALUE;
  *offset = 0;
  *size = f->param_sizes[index];
  return SUCCESS;
}
static CUresult fake_cuLaunchKernel(struct function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shared, struct stream* s, void** params, void** extra) { INJECT();
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s; (void)params; (void)extra;
  return SUCCESS;
}

/* ---- capture and graphs ---- */
struct graph { int mem_nodes; };
static CUresult fake_cuStreamBeginCapture(struct stream* s, int mode) { INJECT();
  if (s->capturing) return INVALID_VALUE;  /* already recording (its own, or a capture it joined) */
  s->capturing = mode + 1;
  s->relaxed = mode == 2;
  s->began_on = pthread_self();
  s->capture_id = next_capture_id++;
  __atomic_add_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static CUresult fake_cuStreamEndCapture(struct stream* s, struct graph** out) { INJECT();
  *out = NULL;
  if (!s->capturing) return CAPTURE_UNMATCHED;
  if (!s->joined && !s->relaxed && !pthread_equal(s->began_on, pthread_self())) return 908; /* WRONG_THREAD */
  if (!s->joined) __atomic_sub_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);  /* a joined one was never counted */
  s->capturing = 0;
  if (env_int("FAKE_CUDA_INVALIDATE", 0) || s->capture_id < invalidated_before) return CAPTURE_INVALIDATED;
  *out = calloc(1, sizeof(struct graph));
  (*out)->mem_nodes = env_int("FAKE_CUDA_MEM_NODES", 0);
  return SUCCESS;
}
static CUresult fake_cuStreamGetCaptureInfo_v3(struct stream* s, int* status, unsigned long long* id, void* g, void* d,
                                               void* e, size_t* n) { INJECT();
  (void)g; (void)d; (void)e; (void)n;
  __atomic_add_fetch(&capture_queries, 1, __ATOMIC_SEQ_CST);
  if (stream_entry_answer(&own_streams, (uintptr_t)s) < 0) {  /* another library's, or 1, 2 */
    const int answer = stream_entry_answer(&foreign_captures, (uintptr_t)s);
    if (answer >= 100) return answer;
    *status = answer < 0 ? 0 : answer;
    if (id) *id = answer > 0 ? 1000 + (unsigned long long)(uintptr_t)s : 0;
    return SUCCESS;
  }
  /* CU_STREAM_CAPTURE_STATUS_: NONE 0, ACTIVE 1, INVALIDATED 2 */
  *status = !s->capturing ? 0 : s->capture_id < invalidated_before ? 2 : 1;
  if (id) *id = s->capture_id;
  return SUCCESS;
}
static CUresult fake_cuStreamGetCaptureInfo_v2(struct stream* s, int* status, unsigned long long* id, void* g, void* d,
                                               size_t* n) { INJECT();
  return fake_cuStreamGetCaptureInfo_v3(s, status, id, g, d, NULL, n);
}
static CUresult fake_cuThreadExchangeStreamCaptureMode(int* mode) { INJECT();
  int previous = capture_mode;
  capture_mode = *mode;
  *mode = previous;
  return SUCCESS;
}
static int node_tags[64];
static CUresult fake_cuGraphGetNodes(struct graph* g, int** nodes, size_t* count) { INJECT();
  size_t total = (size_t)g->mem_nodes + 1;
  if (nodes)
    for (size_t i = 0; i < total && i < *count && i < 64; ++i) nodes[i] = &node_tags[i];
  *count = total;
  return SUCCESS;
}
static CUresult fake_cuGraphNodeGetType(int* node, int* type) { INJECT();
  *type = node == &node_tags[0] ? 0 /* kernel */ : 10 /* mem alloc */;
  return SUCCESS;
}
static CUresult fake_cuGraphInstantiateWithFlags(void** exec, struct graph* g, unsigned long long flags) { INJECT();
  (void)g; (void)flags;
  *exec = malloc(8);
  return SUCCESS;
}
static CUresult fake_cuGraphUpload(void* exec, struct stream* s) { INJECT(); (void)exec; (void)s; return SUCCESS; }
static CUresult fake_cuGraphLaunch(void* exec, struct stream* s) { INJECT(); (void)exec; (void)s; return SUCCESS; }
struct update_info { int result; void* error_node; void* error_from; };
static CUresult fake_cuGraphExecUpdate(void* exec, struct graph* g, struct update_info* info) { INJECT();
  (void)exec;
  info->result = g->mem_nodes ? 2 /* topology changed */ : 0;
  return g->mem_nodes ? 910 : SUCCESS;
}
static CUresult fake_cuGraphDestroy(struct graph* g) { INJECT(); free(g); return SUCCESS; }
static CUresult fake_cuGraphExecDestroy(void* exec) { INJECT(); free(exec); return SUCCESS; }
static long stream_waits;
static unsigned long long last_wait_stream;
/* fake_cuda_stream_waits() / fake_cuda_last_wait_stream() (exported, not CUDA entry points):
 * how many cuStreamWaitEvent calls there were, and the stream of the last one. */
EXPORT long fake_cuda_stream_waits(void) { return __atomic_load_n(&stream_waits, __ATOMIC_SEQ_CST); }
EXPORT unsigned long long fake_cuda_last_wait_stream(void) { return __atomic_load_n(&last_wait_stream, __ATOMIC_SEQ_CST); }
static CUresult fake_cuStreamWaitEvent(struct stream* s, void* e, unsigned flags) { INJECT();
  (void)e;
  (void)flags;
  __atomic_store_n(&last_wait_stream, (unsigned long long)(uintptr_t)s, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&stream_waits, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}

/* ---- the table cuGetProcAddress_v2 serves: base name, ABI version, versioned export ---- */
#define FAKE_ENTRIES(X)                                                              \
  X(cuDeviceGet, 2000, cuDeviceGet)                                                  \
  X(cuDeviceGetName, 2000, cuDeviceGetName)                                          \
  X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)                        \
  X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)                  \
  X(cuCtxGetCurrent, 4000, cuCtxGetCurrent)                                          \
  X(cuCtxSetCurrent, 4000, cuCtxSetCurrent)                                          \
  X(cuCtxSynchronize, 2000, cuCtxSynchronize)                                        \
  X(cuMemGetInfo, 3020, cuMemGetInfo_v2)                                             \
  X(cuStreamCreate, 2000, cuStreamCreate)                                            \
  X(cuStreamDestroy, 4000, cuStreamDestroy_v2)                                       \
  X(cuStreamSynchronize, 2000, cuStreamSynchronize)                                  \
  X(cuStreamQuery, 2000, cuStreamQuery)                                              \
  X(cuEventCreate, 2000, cuEventCreate)                                              \
  X(cuEventDestroy, 4000, cuEventDestroy_v2)                                         \
  X(cuEventRecord, 2000, cuEventRecord)                                              \
  X(cuEventSynchronize, 2000, cuEventSynchronize)                                    \
  X(cuEventQuery, 2000, cuEventQuery)                                                \
  X(cuEventElapsedTime, 2000, cuEventElapsedTime)                                    \
  X(cuMemAlloc, 3020, cuMemAlloc_v2)                                                 \
  X(cuMemFree, 3020, cuMemFree_v2)                                                   \
  X(cuMemAllocAsync, 11020, cuMemAllocAsync)                                         \
  X(cuMemFreeAsync, 11020, cuMemFreeAsync)                                           \
  X(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2)                                             \
  X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2)                                             \
  X(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2)                                             \
  X(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2)                                   \
  X(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2)                                   \
  X(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2)                                   \
  X(cuMemsetD32, 3020, cuMemsetD32_v2)                                               \
  X(cuMemsetD32Async, 3020, cuMemsetD32Async)                                        \
  X(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx)                                    \
  X(cuModuleUnload, 2000, cuModuleUnload)                                            \
  X(cuModuleGetFunction, 2000, cuModuleGetFunction)                                  \
  X(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo)                                   \
  X(cuLaunchKernel, 4000, cuLaunchKernel)                                            \
  X(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2)                            \
  X(cuStreamEndCapture, 10000, cuStreamEndCapture)                                   \
  X(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode)     \
  X(cuGraphGetNodes, 10000, cuGraphGetNodes)                                         \
  X(cuGraphNodeGetType, 10000, cuGraphNodeGetType)                                   \
  X(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags)                 \
  X(cuGraphUpload, 11010, cuGraphUpload)                                             \
  X(cuGraphLaunch, 10000, cuGraphLaunch)                                             \
  X(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2)                                  \
  X(cuGraphDestroy, 10000, cuGraphDestroy)                                           \
  X(cuGraphExecDestroy, 10000, cuGraphExecDestroy)                                    \
  X(cuStreamWaitEvent, 3020, cuStreamWaitEvent)                                      \
  X(cuPointerGetAttribute, 4000, cuPointerGetAttribute)

struct entry { const char* name; int version; void* pointer; };
#define FAKE_ENTRY(base, version, versioned) {#base, version, (void*)fake_##base},
static const struct entry entries[] = {
    FAKE_ENTRIES(FAKE_ENTRY)
    /* two ABIs of one base name: the newest one not newer than the request wins */
    {"cuStreamGetCaptureInfo", 12030, (void*)fake_cuStreamGetCaptureInfo_v3},
    {"cuStreamGetCaptureInfo", 11030, (void*)fake_cuStreamGetCaptureInfo_v2},
    {"cuInit", 2000, (void*)cuInit},
    {"cuDriverGetVersion", 2020, (void*)cuDriverGetVersion},
    {"cuDeviceGetCount", 2000, (void*)cuDeviceGetCount},
    {"cuGetErrorName", 6000, (void*)cuGetErrorName},
    {"cuGetErrorString", 6000, (void*)cuGetErrorString},
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* found) {
  const char* log = getenv("FAKE_CUDA_LOG");
  if (log) {
    FILE* file = fopen(log, "a");
    if (file) { fprintf(file, "%s %d %llu\n", symbol, version, flags); fclose(file); }
  }
  *pfn = NULL;
  const char* proc = getenv("FAKE_CUDA_PROC");
  if ((proc && strcmp(proc, "none") == 0) || listed("FAKE_CUDA_HIDE", symbol)) {
    if (found) *found = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
  }
  /* As the driver: a request for a version newer than the driver's own is invalid. */
  if (version > env_int("FAKE_CUDA_VERSION", 12040)) {
    if (found) *found = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return INVALID_VALUE;
  }
  int known = 0;
  const struct entry* best = NULL;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; ++i) {
    if (strcmp(entries[i].name, symbol) != 0) continue;
    known = 1;
    if (entries[i].version <= version && (!best || entries[i].version > best->version)) best = &entries[i];
  }
  if (!best) {
    if (found) *found = known ? 2 /* VERSION_NOT_SUFFICIENT */ : 1;
    return NOT_FOUND;
  }
  *pfn = best->pointer;
  if (found) *found = 0;
  return SUCCESS;
}

#ifdef FAKE_EXPORT_VERSIONED
#define FAKE_VERSIONED_EXPORT(base, version, versioned) \
  extern __typeof__(fake_##base) versioned __attribute__((alias("fake_" #base), visibility("default")));
FAKE_ENTRIES(FAKE_VERSIONED_EXPORT)
extern __typeof__(fake_cuStreamGetCaptureInfo_v3) cuStreamGetCaptureInfo_v3
    __attribute__((alias("fake_cuStreamGetCaptureInfo_v3"), visibility("default")));
extern __typeof__(fake_cuStreamGetCaptureInfo_v2) cuStreamGetCaptureInfo_v2
    __attribute__((alias("fake_cuStreamGetCaptureInfo_v2"), visibility("default")));
#endif
