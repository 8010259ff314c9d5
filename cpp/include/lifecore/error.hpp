// The one exception type the core throws. Its kind names the Python exception the
// bindings raise (lifecore.errors), so policy about which failure is which lives here,
// next to the code that fails, and the bindings only translate.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lifecore {

// One entry per Python exception class in python/lifecore/errors.py (same order, same meaning).
enum class ErrorKind : std::uint8_t {
  Lifecore,            // LifecoreError: base, used only when nothing narrower fits
  InvalidArgument,     // InvalidArgumentError (also a ValueError): bad sizes, names, shapes
  TypeMismatch,        // LifecoreTypeError (also a TypeError): wrong argument types / counts
  CaptureState,        // CaptureStateError: an out-of-order capture transition or op while recording
  CaptureRefused,      // CaptureRefusedError: end_capture refused a recording (memory nodes, invalidated, queued error)
  Driver,              // DriverError: a vendor call failed (code, name, call)
  BackendUnavailable,  // BackendUnavailableError: the backend cannot start here (reason)
  StaleAuthority,      // StaleAuthorityError: stale epoch / fingerprint / authority / foreign coordinator
  Capacity,            // CapacityError: accounting that can never be satisfied or is inconsistent
  BudgetExceeded,      // BudgetExceededError: a capture-session limit under on_limit=fail (budget, cumulative)
  Admission,           // AdmissionError: a plan or request refused at admission
  SessionState,        // SessionStateError: an operation the session's phase forbids (terminal, fail-closed, ...)
  Closed,              // ClosedError: the object (coordinator, device, graph, buffer) is closed / destroyed
  CaptureSession,      // CaptureSessionError: a capture-session runtime rule was broken (drain, twice, ...)
};

// Extra attributes set on the Python exception instance (e.g. DriverError.code).
using ErrorAttribute = std::pair<std::string, std::variant<std::int64_t, std::string, bool>>;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::vector<ErrorAttribute> attributes = {})
      : std::runtime_error(message), kind_(kind), attributes_(std::move(attributes)) {}

  ErrorKind kind() const noexcept { return kind_; }
  const std::vector<ErrorAttribute>& attributes() const noexcept { return attributes_; }

 private:
  ErrorKind kind_;
  std::vector<ErrorAttribute> attributes_;
};

[[noreturn]] inline void raise(ErrorKind kind, const std::string& message,
                               std::vector<ErrorAttribute> attributes = {}) {
  throw Error(kind, message, std::move(attributes));
}

}  // namespace lifecore
