// A live sequence's request id, kept once and shared by what names it (its backing and its
// session state): copies share one immutable text with an atomic count, so a 40-character id
// costs one 64-byte allocation per sequence instead of one per holder, and a short one 8
// bytes per holder instead of a 32-byte std::string.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

namespace lifecore::sequence {

class RequestId {
 public:
  RequestId() noexcept = default;  // the empty id, no allocation
  // Copies `text` (InvalidArgumentError above 2^32 - 1 bytes; bad_alloc).
  explicit RequestId(std::string_view text);
  RequestId(const RequestId& other) noexcept : rep_(other.rep_) {
    if (rep_) rep_->holders.fetch_add(1, std::memory_order_relaxed);
  }
  RequestId(RequestId&& other) noexcept : rep_(other.rep_) { other.rep_ = nullptr; }
  RequestId& operator=(RequestId other) noexcept {
    std::swap(rep_, other.rep_);
    return *this;
  }
  ~RequestId() { release(); }

  std::string_view view() const noexcept { return rep_ ? std::string_view(text_of(rep_), rep_->size) : std::string_view(); }
  operator std::string_view() const noexcept { return view(); }

 private:
  struct Rep {
    std::atomic<std::uint32_t> holders;  // a sequence's few holders and their temporaries
    std::uint32_t size;
  };  // the text follows it
  static const char* text_of(const Rep* rep) noexcept { return reinterpret_cast<const char*>(rep + 1); }
  void release() noexcept;

  Rep* rep_ = nullptr;
};

}  // namespace lifecore::sequence
