// Rejects a concurrent or re-entrant call on one session instead of blocking: a blocked
// caller holding the GIL would deadlock against a backend that released it.
#pragma once

#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

namespace lifecore::capture {

struct CaptureSession::Guard {
  const CaptureSession& session;
  explicit Guard(const CaptureSession& s) : session(s) {
    if (session.busy_.exchange(true, std::memory_order_acquire))
      raise(ErrorKind::CaptureSession, "capture session is in use by another call");
  }
  ~Guard() { session.busy_.store(false, std::memory_order_release); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

}  // namespace lifecore::capture
