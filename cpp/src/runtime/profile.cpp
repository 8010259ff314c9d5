#include "lifecore/runtime/profile.hpp"

namespace lifecore::runtime {

std::shared_ptr<Profile> Profile::start(std::shared_ptr<Stream> stream) {
  Stream::ProfileEvents events = stream->profile_start();
  return std::make_shared<Profile>(std::move(stream), events);
}

Profile::Profile(std::shared_ptr<Stream> stream, Stream::ProfileEvents events)
    : stream_(std::move(stream)), events_(events) {}

Profile::~Profile() { abandon(); }

float Profile::stop() {
  std::lock_guard lock(mutex_);
  const float milliseconds = stream_->profile_stop(events_);
  elapsed_ = milliseconds;
  return milliseconds;
}

void Profile::abandon() noexcept {
  std::lock_guard lock(mutex_);
  if (events_.live) stream_->profile_abandon(events_);
}

bool Profile::stopped() const {
  std::lock_guard lock(mutex_);
  return !events_.live;
}

std::optional<float> Profile::elapsed_ms() const {
  std::lock_guard lock(mutex_);
  return elapsed_;
}

}  // namespace lifecore::runtime
