// What a process forked from this one must not touch. A child of fork() inherits a copy of the
// parent's memory and none of its other threads: a device's worker threads, a driver context,
// the holder of any lock that was held as the process forked. An object made before the fork
// records the generation below; in the child it sees the generation changed, refuses to be used
// (as CUDA refuses a context inherited across fork) and, when dropped, leaves what it owns to the
// parent instead of releasing it, since a release would wait for a thread the child lacks.
#pragma once

#include <cstdint>
#include <memory>

namespace lifecore {

// How many times this process's ancestry forked since lifecore was loaded: each child of fork()
// sees one more than its parent did (a handler of pthread_atfork counts it).
std::uint64_t fork_generation() noexcept;

// Keeps `object` alive until the process exits, its destructor never run: what a forked child
// leaves to its parent. Takes no lock (one held as the process forked would never be released).
void keep_until_exit(std::shared_ptr<void> object) noexcept;

// This process's id, for a message naming the process an object was made in.
long current_process_id() noexcept;

}  // namespace lifecore
