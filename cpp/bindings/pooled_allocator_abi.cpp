// The pooled allocator (runtime/pooled_allocator.hpp) as the C ABI of a pluggable allocator
// (torch.cuda.memory.CUDAPluggableAllocator loads these two symbols from this module's file),
// and the Python calls that route a stream to it. The C functions take no GIL and never throw.
#include <cstddef>
#include <cstdint>

#include <nanobind/stl/shared_ptr.h>

#include "bindings.hpp"
#include "lifecore/runtime/pooled_allocator.hpp"
#include "lifecore/runtime/stream.hpp"

#define LIFECORE_POOLED_ALLOC_SYMBOL "lifecore_pooled_alloc"
#define LIFECORE_POOLED_FREE_SYMBOL "lifecore_pooled_free"

extern "C" {

// void* alloc(size_t size, int device, cudaStream_t stream): the device is the stream's.
__attribute__((visibility("default"))) void* lifecore_pooled_alloc(std::size_t size, int /*device*/,
                                                                   void* stream) noexcept {
  return lifecore::runtime::PooledAllocator::instance().allocate(size, reinterpret_cast<std::uintptr_t>(stream));
}

// void free(void* ptr, size_t size, int device, cudaStream_t stream): the stream is the allocation's.
__attribute__((visibility("default"))) void lifecore_pooled_free(void* ptr, std::size_t /*size*/, int /*device*/,
                                                                 void* stream) noexcept {
  lifecore::runtime::PooledAllocator::instance().release(ptr, reinterpret_cast<std::uintptr_t>(stream));
}

}  // extern "C"

namespace lifecore::bindings {

void init_pooled_allocator(nb::module_& m) {
  using namespace nb::literals;
  using runtime::PooledAllocator;
  m.attr("POOLED_ALLOC_SYMBOL") = LIFECORE_POOLED_ALLOC_SYMBOL;
  m.attr("POOLED_FREE_SYMBOL") = LIFECORE_POOLED_FREE_SYMBOL;
  m.def("pooled_allocator_route",
        [](std::shared_ptr<runtime::Stream> stream) { PooledAllocator::instance().route(stream); }, "stream"_a,
        "Routes the pooled allocator's requests that name this stream's native handle to it (idempotent):\n"
        "each is served as a Buffer lent from the stream's memory manager, primed or retained by its capture\n"
        "windows like Stream.alloc's. InvalidArgumentError when another live stream holds the handle.");
  m.def("pooled_allocator_unroute",
        [](const runtime::Stream& stream) { return PooledAllocator::instance().unroute(stream); }, "stream"_a,
        "Stops routing requests to the stream (what it lent stays valid until freed); False when it was not routed.");
  m.def("pooled_allocator_stats",
        []() {
          auto s = PooledAllocator::instance().stats();
          nb::dict out;
          out["allocations"] = s.allocations;
          out["releases"] = s.releases;
          out["live"] = s.live;
          out["live_bytes"] = s.live_bytes;
          out["unknown_stream"] = s.unknown_stream;
          out["refused"] = s.refused;
          out["unknown_pointer"] = s.unknown_pointer;
          out["streams"] = s.streams;
          return out;
        },
        nb::sig("def pooled_allocator_stats() -> dict[str, int]"),
        "The pooled allocator's counters: allocations, releases, live, live_bytes, unknown_stream (requests\n"
        "for a stream not routed), refused (a routed stream could not serve them), unknown_pointer (frees of\n"
        "memory it did not lend), streams (routed now).");
}

}  // namespace lifecore::bindings
