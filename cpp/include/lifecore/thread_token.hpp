// Who the calling thread is, for rules that name a thread (only the thread that began a capture
// may end it). An operating system reuses its thread ids once a thread exits, so a new thread
// could pass for a capturing thread that is gone; these tokens are never reused.
#pragma once

#include <cstdint>

namespace lifecore {

// A token per thread, unique for the life of the process (never 0).
std::uint64_t thread_token() noexcept;

}  // namespace lifecore
