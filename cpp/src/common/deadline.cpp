#include "lifecore/deadline.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include "lifecore/error.hpp"

namespace lifecore {
namespace {

// Seconds as Python prints them (-1.5, not -1.500000): the shortest text that reads back.
std::string seconds_text(double seconds) {
  char text[32];
  const auto written = std::to_chars(text, text + sizeof text, seconds);
  return std::string(text, written.ptr);
}

}  // namespace

Deadline deadline_after(std::optional<double> timeout_seconds, const char* operation) {
  using Clock = std::chrono::steady_clock;
  if (!timeout_seconds) return std::nullopt;
  const double seconds = *timeout_seconds;
  if (std::isnan(seconds))
    raise(ErrorKind::InvalidArgument, std::string(operation) + ": timeout must be a number of seconds, got nan");
  if (seconds < 0)
    raise(ErrorKind::InvalidArgument,
          std::string(operation) + ": timeout must not be negative, got " + seconds_text(seconds));
  const auto now = Clock::now();
  // Compared in floating point before any integer conversion: a timeout the clock cannot
  // reach (infinity, 1e10 s, ...) has no deadline instead of a wrapped one.
  const double room = std::chrono::duration<double>(Clock::time_point::max() - now).count();
  if (!(seconds < room / 2)) return std::nullopt;
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace lifecore
