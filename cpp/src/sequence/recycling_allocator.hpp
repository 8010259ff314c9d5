// An allocator for the records a sequence makes and drops at a high rate (its backing,
// snapshots, admitted resources and session state): each thread keeps up to a bounded number
// of freed blocks of one size and hands them out again before asking operator new, so a burst
// of admissions after a burst of releases mostly skips the general allocator (whose own
// per-thread cache holds only a few blocks of a size). Blocks come from operator new, so one
// freed on another thread than it was made on is kept there, or deleted. A thread's kept
// blocks are deleted when it exits.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace lifecore::sequence {

namespace detail {

template <std::size_t Size>
class BlockCache {
 public:
  static void* take() {
    Kept& kept = kept_;
    if (kept.count != 0) return kept.blocks[--kept.count];
    return ::operator new(Size);
  }
  static void give(void* block) noexcept {
    Kept& kept = kept_;
    if (kept.count < keep && !kept.drained) {
      if (kept.count == 0) (void)&drain_;  // the first block kept: its thread's drain is armed
      kept.blocks[kept.count++] = block;
      return;
    }
    ::operator delete(block, Size);
  }

 private:
  static constexpr std::size_t keep = 1024;
  // Trivial, so it is valid until the thread's storage goes (after every drain ran).
  struct Kept {
    void* blocks[keep];
    std::size_t count;
    bool drained;
  };
  struct Drain {
    ~Drain() {
      kept_.drained = true;  // blocks given later (by later thread-exit destructors) are deleted
      while (kept_.count != 0) ::operator delete(kept_.blocks[--kept_.count], Size);
    }
  };
  static thread_local Kept kept_;
  static thread_local Drain drain_;
};

template <std::size_t Size>
thread_local typename BlockCache<Size>::Kept BlockCache<Size>::kept_{};
template <std::size_t Size>
thread_local typename BlockCache<Size>::Drain BlockCache<Size>::drain_;

}  // namespace detail

template <class T>
struct RecyclingAllocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "over-aligned records are not recycled");

  RecyclingAllocator() noexcept = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n == 1) return static_cast<T*>(detail::BlockCache<sizeof(T)>::take());
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1) detail::BlockCache<sizeof(T)>::give(p);
    else std::allocator<T>{}.deallocate(p, n);
  }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const noexcept { return true; }
};

// std::make_shared with recycled blocks.
template <class T, class... Args>
std::shared_ptr<T> make_recycled(Args&&... args) {
  return std::allocate_shared<T>(RecyclingAllocator<std::remove_const_t<T>>{}, std::forward<Args>(args)...);
}

}  // namespace lifecore::sequence
