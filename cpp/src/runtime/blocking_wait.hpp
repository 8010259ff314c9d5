// A wait on the device that may start where the caller holds a lock of the embedding runtime:
// dropping the last reference to a Graph or a Device from Python runs its destructor with the
// interpreter lock held, and that destructor waits for the device. The embedding (the Python
// binding) installs hooks that let go of its lock for the wait's duration, so no other thread
// of the embedding stalls while the device is busy. The core knows nothing of Python.
#pragma once

#include <mutex>

namespace lifecore::runtime {

struct BlockingWaitHooks {
  // Lets go of the embedding's lock if this thread holds it; returns what `reacquire` needs
  // (nullptr when nothing was let go). Never throws.
  void* (*release)() = nullptr;
  void (*reacquire)(void* token) = nullptr;
};

// Installed once, before any wait (the binding does it at import).
void set_blocking_wait_hooks(BlockingWaitHooks hooks) noexcept;

// For the scope of a wait: the embedding's lock is let go on entry and taken back on exit.
class BlockingWait {
 public:
  BlockingWait() noexcept;
  ~BlockingWait();
  BlockingWait(const BlockingWait&) = delete;
  BlockingWait& operator=(const BlockingWait&) = delete;

 private:
  void* token_ = nullptr;
};

// Takes `mutex` for the scope. While another thread holds it (a stream's lock is held through
// a sync, for as long as the device takes), the wait lets go of the embedding's lock, and
// `mutex` is never held while that lock is taken back: no other thread of the embedding stalls
// behind the wait, and no order between the two locks can deadlock.
template <class Mutex>
class LockWithoutStalling {
 public:
  explicit LockWithoutStalling(Mutex& mutex) : mutex_(mutex) {
    while (!mutex_.try_lock()) {
      BlockingWait wait;
      std::lock_guard<Mutex> until_the_holder_is_done(mutex_);
    }
  }
  ~LockWithoutStalling() { mutex_.unlock(); }
  LockWithoutStalling(const LockWithoutStalling&) = delete;
  LockWithoutStalling& operator=(const LockWithoutStalling&) = delete;

 private:
  Mutex& mutex_;
};

}  // namespace lifecore::runtime
