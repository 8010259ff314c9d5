// A measurement of the device time a stream's work takes: driver events recorded around it.
// Made by Profile::start (the start event is recorded at once), ended by stop (the end event is
// recorded and waited on: a blocking call). The rules for capture windows are Stream's (see
// Stream::profile_start). Thread-safe; a profile that is never stopped releases its events.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

class Profile {
 public:
  static std::shared_ptr<Profile> start(std::shared_ptr<Stream> stream);
  explicit Profile(std::shared_ptr<Stream> stream, Stream::ProfileEvents events);
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Waits for the work issued since start and returns the milliseconds between the two events.
  // ClosedError when already stopped; a failure releases the events (the profile is over).
  float stop();
  // Releases the events without waiting (the profiled work raised); no-op once stopped.
  void abandon() noexcept;
  bool stopped() const;
  // The measured time; empty until stop succeeded.
  std::optional<float> elapsed_ms() const;
  const std::shared_ptr<Stream>& stream() const noexcept { return stream_; }

 private:
  std::shared_ptr<Stream> stream_;
  mutable std::mutex mutex_;
  Stream::ProfileEvents events_;
  std::optional<float> elapsed_;
};

}  // namespace lifecore::runtime
