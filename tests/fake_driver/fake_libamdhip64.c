/* A fake HIP runtime (and hiprtc), built only by the tests (tests/test_backend_hip_fake.py), so
 * the HIP backend can be checked on machines without an AMD GPU. One library exports both the
 * runtime's and hiprtc's entry points under their plain names, and hipGetProcAddress serves
 * the same ones; point LIFECORE_LIBHIP and LIFECORE_LIBHIPRTC at it.
 *
 * Behaviour, chosen by environment variables:
 *   FAKE_HIP_DEVICES=n      what hipGetDeviceCount reports (default 1; 0 answers hipErrorNoDevice)
 *   FAKE_HIP_LOG=path       append one line per kernel launch: "launch <kernel> <grid x> <block x> <args>"
 *   FAKE_HIPRTC_FAIL=1      hiprtcCompileProgram fails with a log
 *   FAKE_HIP_POINTER_ORDINAL=n  the device hipPointerGetAttribute names for hipMalloc memory
 *                           (default 0); any other address is hipErrorInvalidValue
 *   FAKE_HIP_PROC_VERSION=n the runtime's version as hipGetProcAddress counts it, 100 * major +
 *                           minor (default 601); a request for a newer one is refused
 *   FAKE_HIP_INVALIDATED_STAYS=1  as ROCm before 7.0: hipStreamEndCapture refuses an invalidated
 *                           capture (901, no graph) without ending it, so the stream stays
 *                           invalidated (its capture query says so, and every call on it fails
 *                           with 901) until a begin, which refuses only an active capture, and
 *                           its end; =2: that begin is refused too (the stream cannot be freed)
 * Compiled with -DFAKE_HIP_BEFORE_GRAPH_MEMORY it is a runtime from before graph memory nodes:
 * no hipGraphAddMemAllocNode, hipMallocAsync, hipFreeAsync or hipGetProcAddress, and node types
 * counted from 1, so its symbol copies are types 10 and 11 (memory nodes' numbers since); and,
 * as ROCm 5.2, hipStreamGetCaptureInfo answers hipErrorUnknown (999) for the null stream, which
 * hipStreamIsCapturing answers.
 * fake_hip_proc_served() counts the entry points hipGetProcAddress handed out.
 * "Device memory" is host memory, so copies and memsets really move bytes; kernels do nothing
 * but are logged. A stream in capture records nodes instead of running them; hipDeviceSynchronize
 * while a capture is live fails and invalidates it, and so does hipFree outside relaxed mode.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_ranges.h"

#define EXPORT __attribute__((visibility("default")))

typedef int hipError_t;
enum {
  SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NO_DEVICE = 100, INVALID_DEVICE = 101,
  INVALID_IMAGE = 200, INVALID_HANDLE = 400, NOT_FOUND = 500, CAPTURE_UNSUPPORTED = 900, CAPTURE_INVALIDATED = 901,
  CAPTURE_UNMATCHED = 903, UPDATE_FAILURE = 910, UNKNOWN = 999
};
#ifdef FAKE_HIP_BEFORE_GRAPH_MEMORY
enum { NODE_KERNEL = 1, NODE_MEMCPY = 2, NODE_MEMSET = 3, NODE_MEMCPY_FROM_SYMBOL = 10, NODE_MEMCPY_TO_SYMBOL = 11 };
#else
enum {
  NODE_KERNEL = 0, NODE_MEMCPY = 1, NODE_MEMSET = 2, NODE_MEM_ALLOC = 10, NODE_MEM_FREE = 11,
  NODE_MEMCPY_FROM_SYMBOL = 12, NODE_MEMCPY_TO_SYMBOL = 13
};
#endif
#define MAX_NODES 64

static int env_int(const char* name, int fallback) {
  const char* value = getenv(name);
  return value && *value ? atoi(value) : fallback;
}

/* ---- errors ---- */
static const struct { int code; const char* name; const char* text; } errors[] = {
    {SUCCESS, "hipSuccess", "no error"},
    {INVALID_VALUE, "hipErrorInvalidValue", "fake runtime: invalid argument"},
    {OUT_OF_MEMORY, "hipErrorOutOfMemory", "fake runtime: out of memory"},
    {NO_DEVICE, "hipErrorNoDevice", "fake runtime: no ROCm-capable device is detected"},
    {INVALID_DEVICE, "hipErrorInvalidDevice", "fake runtime: invalid device ordinal"},
    {INVALID_HANDLE, "hipErrorInvalidHandle", "fake runtime: invalid resource handle"},
    {NOT_FOUND, "hipErrorNotFound", "fake runtime: named symbol not found"},
    {CAPTURE_UNSUPPORTED, "hipErrorStreamCaptureUnsupported", "fake runtime: operation not permitted when stream is capturing"},
    {CAPTURE_INVALIDATED, "hipErrorStreamCaptureInvalidated", "fake runtime: capture invalidated"},
    {CAPTURE_UNMATCHED, "hipErrorStreamCaptureUnmatched", "fake runtime: capture unmatched"},
};
EXPORT const char* hipGetErrorName(hipError_t error) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == error) return errors[i].name;
  return "hipErrorUnknown";
}
EXPORT const char* hipGetErrorString(hipError_t error) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == error) return errors[i].text;
  return "unknown error";
}

/* ---- hipGetProcAddress: this library's own exports, for a hipVersion not newer than its own ---- */
static long proc_served;
EXPORT long fake_hip_proc_served(void) { return __atomic_load_n(&proc_served, __ATOMIC_SEQ_CST); }
#ifndef FAKE_HIP_BEFORE_GRAPH_MEMORY
EXPORT hipError_t hipGetProcAddress(const char* symbol, void** pfn, int hip_version, uint64_t flags, int* found) {
  (void)flags;
  *pfn = NULL;
  if (found) *found = 2; /* HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT */
  if (hip_version > env_int("FAKE_HIP_PROC_VERSION", 601)) return INVALID_VALUE;
  Dl_info self;
  void* library = dladdr((void*)hipGetProcAddress, &self) ? dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  if (library) {
    *pfn = dlsym(library, symbol);
    dlclose(library);
  }
  if (!*pfn) {
    if (found) *found = 1; /* HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
  }
  if (found) *found = 0;
  __atomic_add_fetch(&proc_served, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
#endif

/* ---- device ---- */
static __thread int current_device = 0;
static __thread int capture_mode = 0;
EXPORT hipError_t hipInit(unsigned flags) { (void)flags; return env_int("FAKE_HIP_DEVICES", 1) > 0 ? SUCCESS : NO_DEVICE; }
EXPORT hipError_t hipDriverGetVersion(int* version) { *version = 60100000; return SUCCESS; }
EXPORT hipError_t hipRuntimeGetVersion(int* version) { *version = 60100000; return SUCCESS; }
EXPORT hipError_t hipGetDeviceCount(int* count) {
  *count = env_int("FAKE_HIP_DEVICES", 1);
  return *count > 0 ? SUCCESS : NO_DEVICE;
}
EXPORT hipError_t hipDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("FAKE_HIP_DEVICES", 1)) return INVALID_DEVICE;
  *device = ordinal;
  return SUCCESS;
}
EXPORT hipError_t hipDeviceGetName(char* name, int length, int device) {
  snprintf(name, (size_t)length, "fake HIP device %d", device);
  return SUCCESS;
}
EXPORT hipError_t hipSetDevice(int device) {
  if (device < 0 || device >= env_int("FAKE_HIP_DEVICES", 1)) return INVALID_DEVICE;
  current_device = device;
  return SUCCESS;
}
EXPORT hipError_t hipGetDevice(int* device) { *device = current_device; return SUCCESS; }
/* As HIP's (and CUDA's context synchronize): synchronizing the device while any capture on it is
 * live fails and invalidates every live capture, whatever the capture modes. */
static long live_captures;
static unsigned long long invalidated_before;
static unsigned long long next_capture_id = 1;
/* Fails a call that conflicts with the live captures, and invalidates them (those begun before it). */
static hipError_t invalidate_live_captures(void) {
  invalidated_before = next_capture_id;
  return CAPTURE_UNSUPPORTED;
}
EXPORT hipError_t hipDeviceSynchronize(void) {
  return __atomic_load_n(&live_captures, __ATOMIC_SEQ_CST) > 0 ? invalidate_live_captures() : SUCCESS;
}
EXPORT hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = (size_t)1 << 32;
  *total = (size_t)1 << 33;
  return SUCCESS;
}

/* ---- graphs (recorded by a capturing stream) ---- */
struct graph { int count; int types[MAX_NODES]; };
struct exec { int count; int launches; };

/* ---- streams and events ---- */
struct stream { int capturing; unsigned long long capture_id; struct graph* graph; int invalidated; };
struct event { int recorded; unsigned flags; };
enum { hipEventDisableTiming = 0x2 };

/* As ROCm's captured calls before 7.0: one on a stream whose invalidated capture was never
 * ended fails with 901. */
#define REFUSE_ON_INVALIDATED(s) \
  do { \
    if ((s) && (s)->invalidated) return CAPTURE_INVALIDATED; \
  } while (0)

/* A node for a capturing stream; 1 when the operation was recorded rather than to be run. */
static int record(struct stream* s, int type) {
  if (!s || !s->capturing) return 0;
  if (s->graph->count < MAX_NODES) s->graph->types[s->graph->count++] = type;
  return 1;
}

/* The streams the fake made, so a capture query can tell them from another library's (never
 * dereferenced). */
struct own_stream { struct stream* s; struct own_stream* next; };
static struct own_stream* own_streams;
static pthread_mutex_t own_streams_mutex = PTHREAD_MUTEX_INITIALIZER;
static int own_stream(struct stream* s) {
  int found = 0;
  pthread_mutex_lock(&own_streams_mutex);
  for (struct own_stream* o = own_streams; o && !found; o = o->next) found = o->s == s;
  pthread_mutex_unlock(&own_streams_mutex);
  return found;
}
EXPORT hipError_t hipStreamCreateWithFlags(struct stream** out, unsigned flags) {
  (void)flags;
  *out = calloc(1, sizeof(struct stream));
  struct own_stream* entry = *out ? malloc(sizeof *entry) : NULL;
  if (!entry) { free(*out); return OUT_OF_MEMORY; }
  entry->s = *out;
  pthread_mutex_lock(&own_streams_mutex);
  entry->next = own_streams;
  own_streams = entry;
  pthread_mutex_unlock(&own_streams_mutex);
  return SUCCESS;
}
EXPORT hipError_t hipStreamDestroy(struct stream* s) {
  pthread_mutex_lock(&own_streams_mutex);
  for (struct own_stream** at = &own_streams; *at; at = &(*at)->next)
    if ((*at)->s == s) {
      struct own_stream* gone = *at;
      *at = gone->next;
      free(gone);
      break;
    }
  pthread_mutex_unlock(&own_streams_mutex);
  if (s->capturing) __atomic_sub_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);  /* its capture goes with it */
  free(s->graph);
  free(s);
  return SUCCESS;
}
EXPORT hipError_t hipStreamSynchronize(struct stream* s) { (void)s; return SUCCESS; }
EXPORT hipError_t hipStreamQuery(struct stream* s) { (void)s; return SUCCESS; }
static long timed_events;
/* Events created with timing (not a HIP entry point): those lifecore creates only to order work have none. */
EXPORT long fake_hip_timed_events(void) { return __atomic_load_n(&timed_events, __ATOMIC_SEQ_CST); }
EXPORT hipError_t hipEventCreateWithFlags(struct event** out, unsigned flags) {
  *out = calloc(1, sizeof(struct event));
  if (!*out) return OUT_OF_MEMORY;
  (*out)->flags = flags;
  if (!(flags & hipEventDisableTiming)) __atomic_add_fetch(&timed_events, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
EXPORT hipError_t hipEventDestroy(struct event* e) { free(e); return SUCCESS; }
static unsigned long long last_record_stream, last_wait_stream;
/* The stream of the last hipEventRecord / hipStreamWaitEvent (not HIP entry points); never
 * dereferenced, since it may be another library's or the null stream. */
EXPORT unsigned long long fake_hip_last_record_stream(void) { return __atomic_load_n(&last_record_stream, __ATOMIC_SEQ_CST); }
EXPORT unsigned long long fake_hip_last_wait_stream(void) { return __atomic_load_n(&last_wait_stream, __ATOMIC_SEQ_CST); }
EXPORT hipError_t hipEventRecord(struct event* e, struct stream* s) {
  __atomic_store_n(&last_record_stream, (unsigned long long)(uintptr_t)s, __ATOMIC_SEQ_CST);
  e->recorded = 1;
  return SUCCESS;
}
EXPORT hipError_t hipEventSynchronize(struct event* e) { (void)e; return SUCCESS; }
EXPORT hipError_t hipEventQuery(struct event* e) { (void)e; return SUCCESS; }
EXPORT hipError_t hipEventElapsedTime(float* ms, struct event* a, struct event* b) {
  if (!a->recorded || !b->recorded) return INVALID_VALUE;
  if ((a->flags | b->flags) & hipEventDisableTiming) return INVALID_HANDLE;  /* as HIP: no timing, no time */
  *ms = 0.5f;
  return SUCCESS;
}

/* ---- memory ---- */
/* hipPointerGetAttribute knows the live hipMalloc ranges (fake_ranges.h). The device selected
 * on the calling thread at each allocation is kept: fake_hip_malloc_devices() is a bit mask of
 * them (bit d: an allocation landed on device d), so a test sees where memory went. */
static int malloc_devices;
EXPORT int fake_hip_malloc_devices(void) { return __atomic_load_n(&malloc_devices, __ATOMIC_SEQ_CST); }
EXPORT hipError_t hipMalloc(void** out, size_t bytes) {
  *out = calloc(1, bytes ? bytes : 1);
  if (!*out) return OUT_OF_MEMORY;
  fake_ranges_add((uintptr_t)*out, bytes);
  __atomic_or_fetch(&malloc_devices, 1 << (current_device & 31), __ATOMIC_SEQ_CST);
  return SUCCESS;
}
static hipError_t release_range(void* p) {
  fake_ranges_forget((uintptr_t)p);
  free(p);
  return SUCCESS;
}
/* As HIP's: a free is a potentially unsafe call, refused (and invalidating every live capture)
 * while a capture is live and the calling thread's capture mode is not relaxed. */
EXPORT hipError_t hipFree(void* p) {
  if (__atomic_load_n(&live_captures, __ATOMIC_SEQ_CST) > 0 && capture_mode != 2) return invalidate_live_captures();
  return release_range(p);
}
enum { HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };
EXPORT hipError_t hipPointerGetAttribute(void* data, int attribute, void* p) {
  if (attribute != HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL || !fake_ranges_contain((uintptr_t)p)) return INVALID_VALUE;
  *(int*)data = env_int("FAKE_HIP_POINTER_ORDINAL", 0);
  return SUCCESS;
}
#ifndef FAKE_HIP_BEFORE_GRAPH_MEMORY
EXPORT hipError_t hipMallocAsync(void** out, size_t bytes, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  record(s, NODE_MEM_ALLOC);
  return hipMalloc(out, bytes);
}
EXPORT hipError_t hipFreeAsync(void* p, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  if (record(s, NODE_MEM_FREE)) return SUCCESS;
  return release_range(p);
}
/* Present, never called by lifecore: it tells a runtime with graph memory nodes. */
EXPORT hipError_t hipGraphAddMemAllocNode(void** node, void* graph, void* dependencies, size_t count, void* params) {
  (void)node; (void)graph; (void)dependencies; (void)count; (void)params;
  return INVALID_VALUE;
}
#endif
/* Another library's copies to and from a kernel's global (lifecore makes none). */
EXPORT hipError_t hipMemcpyToSymbolAsync(void* symbol, void* src, size_t n, size_t offset, int kind, struct stream* s) {
  (void)kind;
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMCPY_TO_SYMBOL)) memcpy((char*)symbol + offset, src, n);
  return SUCCESS;
}
EXPORT hipError_t hipMemcpyFromSymbolAsync(void* dst, void* symbol, size_t n, size_t offset, int kind, struct stream* s) {
  (void)kind;
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMCPY_FROM_SYMBOL)) memcpy(dst, (char*)symbol + offset, n);
  return SUCCESS;
}
EXPORT hipError_t hipMemcpyHtoD(void* dst, void* src, size_t n) { memcpy(dst, src, n); return SUCCESS; }
EXPORT hipError_t hipMemcpyDtoH(void* dst, void* src, size_t n) { memcpy(dst, src, n); return SUCCESS; }
EXPORT hipError_t hipMemcpyDtoD(void* dst, void* src, size_t n) { memcpy(dst, src, n); return SUCCESS; }
EXPORT hipError_t hipMemcpyHtoDAsync(void* dst, void* src, size_t n, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMCPY)) memcpy(dst, src, n);
  return SUCCESS;
}
EXPORT hipError_t hipMemcpyDtoHAsync(void* dst, void* src, size_t n, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMCPY)) memcpy(dst, src, n);
  return SUCCESS;
}
EXPORT hipError_t hipMemcpyDtoDAsync(void* dst, void* src, size_t n, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMCPY)) memcpy(dst, src, n);
  return SUCCESS;
}
EXPORT hipError_t hipMemsetD32(void* dst, int value, size_t count) {
  for (size_t i = 0; i < count; ++i) memcpy((char*)dst + 4 * i, &value, 4);
  return SUCCESS;
}
EXPORT hipError_t hipMemsetD32Async(void* dst, int value, size_t count, struct stream* s) {
  REFUSE_ON_INVALIDATED(s);
  if (!record(s, NODE_MEMSET)) hipMemsetD32(dst, value, count);
  return SUCCESS;
}

/* ---- modules and kernels ---- */
static const char* const kernel_names[] = {"axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"};
struct module { int functions_taken; };
struct function { const char* name; };
static struct function functions[4] = {{"axpy_f32"}, {"scale_f32"}, {"add_f32"}, {"axpy_info_f32"}};

EXPORT hipError_t hipModuleLoadData(struct module** out, const void* image) {
  if (!image) return INVALID_VALUE;
  *out = calloc(1, sizeof(struct module));
  return *out ? SUCCESS : OUT_OF_MEMORY;
}
EXPORT hipError_t hipModuleUnload(struct module* m) { free(m); return SUCCESS; }
EXPORT hipError_t hipModuleGetFunction(struct function** out, struct module* m, const char* name) {
  (void)m;
  for (int i = 0; i < 4; ++i)
    if (strcmp(kernel_names[i], name) == 0) { *out = &functions[i]; return SUCCESS; }
  return NOT_FOUND;
}
EXPORT hipError_t hipModuleLaunchKernel(struct function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared, struct stream* s, void** params,
                                        void** extra) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)extra;
  REFUSE_ON_INVALIDATED(s);
  if (record(s, NODE_KERNEL)) return SUCCESS;
  const char* path = getenv("FAKE_HIP_LOG");
  if (path && *path) {
    FILE* log = fopen(path, "a");
    if (log) {
      unsigned first = 0;
      if (params && params[0]) memcpy(&first, params[0], sizeof first);
      fprintf(log, "launch %s %u %u %u\n", f->name, gx, bx, first);
      fclose(log);
    }
  }
  return SUCCESS;
}

/* ---- capture ---- */
EXPORT hipError_t hipStreamBeginCapture(struct stream* s, int mode) {
  (void)mode;
  if (s->capturing) return INVALID_VALUE;
  if (s->invalidated) {
    if (env_int("FAKE_HIP_INVALIDATED_STAYS", 0) == 2) return CAPTURE_INVALIDATED;
    s->invalidated = 0;  /* only an active capture is refused: this one starts afresh */
  }
  s->graph = calloc(1, sizeof(struct graph));
  if (!s->graph) return OUT_OF_MEMORY;
  s->capturing = 1;
  s->capture_id = next_capture_id++;
  __atomic_add_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);
  return SUCCESS;
}
EXPORT hipError_t hipStreamEndCapture(struct stream* s, struct graph** out) {
  *out = NULL;
  if (!s->capturing) return CAPTURE_UNMATCHED;
  s->capturing = 0;
  __atomic_sub_fetch(&live_captures, 1, __ATOMIC_SEQ_CST);
  if (s->capture_id < invalidated_before) {
    free(s->graph);
    s->graph = NULL;
    if (env_int("FAKE_HIP_INVALIDATED_STAYS", 0)) s->invalidated = 1;  /* not ended: it stays invalidated */
    return CAPTURE_INVALIDATED;
  }
  *out = s->graph;
  s->graph = NULL;
  return SUCCESS;
}
/* The capture state a test gives another library's stream (never dereferenced): 0 none,
 * 1 active, 2 invalidated, or a status (>= 100) the query returns. One such stream at a time. */
static unsigned long long foreign_capture_stream;
static int foreign_capture_answer;
EXPORT void fake_hip_set_foreign_capture(unsigned long long stream, int answer) {
  foreign_capture_stream = stream;
  foreign_capture_answer = answer;
}
EXPORT hipError_t hipStreamGetCaptureInfo(struct stream* s, int* status, unsigned long long* id) {
  if (foreign_capture_stream != 0 && (uintptr_t)s == foreign_capture_stream) {
    if (foreign_capture_answer >= 100) return foreign_capture_answer;
    *status = foreign_capture_answer;
    if (id) *id = foreign_capture_answer ? 7 : 0;
    return SUCCESS;
  }
#ifdef FAKE_HIP_BEFORE_GRAPH_MEMORY
  if (!s) return UNKNOWN;
#endif
  if (!own_stream(s)) {  /* the null stream, or another library's */
    *status = 0;
    if (id) *id = 0;
    return SUCCESS;
  }
  *status = s->capturing ? 1 : s->invalidated ? 2 : 0;
  if (id) *id = s->capturing ? s->capture_id : 0;
  return SUCCESS;
}
EXPORT hipError_t hipStreamIsCapturing(struct stream* s, int* status) {
  if (!own_stream(s)) {  /* the null stream, or another library's */
    *status = 0;
    return SUCCESS;
  }
  *status = s->capturing ? 1 : s->invalidated ? 2 : 0;
  return SUCCESS;
}
EXPORT hipError_t hipThreadExchangeStreamCaptureMode(int* mode) {
  int previous = capture_mode;
  capture_mode = *mode;
  *mode = previous;
  return SUCCESS;
}
EXPORT hipError_t hipGraphGetNodes(struct graph* g, int** nodes, size_t* count) {
  if (!nodes) { *count = (size_t)g->count; return SUCCESS; }
  size_t n = *count < (size_t)g->count ? *count : (size_t)g->count;
  for (size_t i = 0; i < n; ++i) nodes[i] = &g->types[i];
  *count = n;
  return SUCCESS;
}
EXPORT hipError_t hipGraphNodeGetType(int* node, int* type) { *type = *node; return SUCCESS; }
EXPORT hipError_t hipGraphInstantiate(struct exec** out, struct graph* g, void* error_node, char* log, size_t size) {
  (void)error_node; (void)log; (void)size;
  *out = calloc(1, sizeof(struct exec));
  if (!*out) return OUT_OF_MEMORY;
  (*out)->count = g->count;
  return SUCCESS;
}
EXPORT hipError_t hipGraphInstantiateWithFlags(struct exec** out, struct graph* g, unsigned long long flags) {
  (void)flags;
  return hipGraphInstantiate(out, g, NULL, NULL, 0);
}
EXPORT hipError_t hipGraphUpload(struct exec* e, struct stream* s) { (void)e; (void)s; return SUCCESS; }
EXPORT hipError_t hipGraphLaunch(struct exec* e, struct stream* s) { (void)s; ++e->launches; return SUCCESS; }
EXPORT hipError_t hipGraphExecUpdate(struct exec* e, struct graph* g, void** error_node, int* result) {
  *error_node = NULL;
  if (e->count != g->count) { *result = 2; return UPDATE_FAILURE; } /* topology changed */
  *result = 0;
  return SUCCESS;
}
EXPORT hipError_t hipGraphDestroy(struct graph* g) { free(g); return SUCCESS; }
EXPORT hipError_t hipGraphExecDestroy(struct exec* e) { free(e); return SUCCESS; }
EXPORT hipError_t hipStreamWaitEvent(struct stream* s, struct event* e, unsigned flags) {
  (void)e;
  (void)flags;
  __atomic_store_n(&last_wait_stream, (unsigned long long)(uintptr_t)s, __ATOMIC_SEQ_CST);
  return SUCCESS;
}

/* ---- hiprtc ---- */
typedef int hiprtcResult;
struct program { int compiled; };
static const char fake_log[] = "fake hiprtc: error: the fake compiler refuses";
static const char fake_code[] = "FAKE-HIP-CODE-OBJECT";
EXPORT const char* hiprtcGetErrorString(hiprtcResult r) { return r == 0 ? "HIPRTC_SUCCESS" : "HIPRTC_ERROR_COMPILATION"; }
EXPORT hiprtcResult hiprtcCreateProgram(struct program** out, const char* src, const char* name, int n,
                                        const char* const* headers, const char* const* includes) {
  (void)name; (void)n; (void)headers; (void)includes;
  if (!src) return 3;
  *out = calloc(1, sizeof(struct program));
  return *out ? 0 : 1;
}
EXPORT hiprtcResult hiprtcCompileProgram(struct program* p, int n, const char* const* options) {
  (void)n; (void)options;
  if (env_int("FAKE_HIPRTC_FAIL", 0)) return 6;
  p->compiled = 1;
  return 0;
}
EXPORT hiprtcResult hiprtcGetProgramLogSize(struct program* p, size_t* size) { (void)p; *size = sizeof fake_log; return 0; }
EXPORT hiprtcResult hiprtcGetProgramLog(struct program* p, char* log) { (void)p; memcpy(log, fake_log, sizeof fake_log); return 0; }
EXPORT hiprtcResult hiprtcGetCodeSize(struct program* p, size_t* size) { *size = p->compiled ? sizeof fake_code : 0; return 0; }
EXPORT hiprtcResult hiprtcGetCode(struct program* p, char* code) { (void)p; memcpy(code, fake_code, sizeof fake_code); return 0; }
EXPORT hiprtcResult hiprtcDestroyProgram(struct program** p) { free(*p); *p = NULL; return 0; }
