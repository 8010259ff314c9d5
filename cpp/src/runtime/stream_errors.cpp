#include "lifecore/runtime/stream_errors.hpp"

#include <utility>

namespace lifecore::runtime {

void StreamErrors::push(Error error, WindowId window, std::optional<CaptureOwner> owner) {
  errors_.push_back(QueuedError{std::move(error), window, owner});
  ++pushed_;
}

std::string describe_origin(const QueuedError& error) {
  if (!error.owner) return "";
  return " (queued in the capture window of owner " + std::to_string(*error.owner) + ")";
}

void StreamErrors::surface(const std::string& where) {
  if (errors_.empty()) return;
  std::vector<QueuedError> errors = std::move(errors_);
  errors_.clear();
  const QueuedError& first = errors.front();
  std::string message = where + ": an earlier asynchronous operation on this stream failed: " +
                        first.error.message() + describe_origin(first);
  if (errors.size() > 1) message += " (and " + std::to_string(errors.size() - 1) + " more)";
  throw Error(first.error.kind(), message, first.error.attributes());
}

std::vector<QueuedError> StreamErrors::take_window(WindowId window) {
  std::vector<QueuedError> taken;
  std::vector<QueuedError> kept;
  for (auto& error : errors_) (error.window == window ? taken : kept).push_back(std::move(error));
  errors_ = std::move(kept);
  return taken;
}

}  // namespace lifecore::runtime
