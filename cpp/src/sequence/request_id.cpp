#include "lifecore/sequence/request_id.hpp"

#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "lifecore/error.hpp"

namespace lifecore::sequence {

RequestId::RequestId(std::string_view text) {
  if (text.empty()) return;
  if (text.size() > std::numeric_limits<std::uint32_t>::max())
    raise(ErrorKind::InvalidArgument, "request_id: " + std::to_string(text.size()) + " bytes is longer than 2^32 - 1");
  void* memory = ::operator new(sizeof(Rep) + text.size());  // cannot wrap: size < 2^32
  rep_ = new (memory) Rep{{1}, static_cast<std::uint32_t>(text.size())};
  std::memcpy(rep_ + 1, text.data(), text.size());
}

void RequestId::release() noexcept {
  if (!rep_ || rep_->holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  rep_->~Rep();
  ::operator delete(rep_);
  rep_ = nullptr;
}

}  // namespace lifecore::sequence
