// The one exception type the core throws. Its kind names the Python exception the
// bindings raise (lifecore.errors), so policy about which failure is which lives here,
// next to the code that fails, and the bindings only translate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace lifecore {

// One row per Python exception class in python/lifecore/errors.py: the kind and the class
// name. The enum and the bindings' name table are both generated from this list, so they
// cannot drift apart.
#define LIFECORE_ERROR_KINDS(X)                                                                          \
  X(Lifecore, "LifecoreError")                      /* base, used only when nothing narrower fits */    \
  X(InvalidArgument, "InvalidArgumentError")        /* also a ValueError: bad sizes, names, shapes */   \
  X(TypeMismatch, "LifecoreTypeError")              /* also a TypeError: wrong argument types/counts */ \
  X(Overflow, "LifecoreOverflowError")              /* also an OverflowError: a value or result too large */ \
  X(CaptureState, "CaptureStateError")              /* an out-of-order capture transition or op while recording */ \
  X(CaptureRefused, "CaptureRefusedError")          /* end_capture refused a recording */               \
  X(Driver, "DriverError")                          /* a vendor call failed (code, name, call) */       \
  X(DeviceLost, "DeviceLostError")                  /* a sticky driver error: the context is unusable */ \
  X(BackendUnavailable, "BackendUnavailableError")  /* the backend cannot start here (reason) */        \
  X(StaleAuthority, "StaleAuthorityError")          /* stale epoch / fingerprint / authority / foreign coordinator */ \
  X(Capacity, "CapacityError")                      /* accounting that can never be satisfied */        \
  X(BudgetExceeded, "BudgetExceededError")          /* a capture-session limit under on_limit=fail */  \
  X(Admission, "AdmissionError")                    /* a plan or request refused at admission */        \
  X(SessionState, "SessionStateError")              /* an operation the session's phase forbids */      \
  X(Closed, "ClosedError")                          /* the object is closed / destroyed */              \
  X(CaptureSession, "CaptureSessionError")          /* a capture-session runtime rule was broken */

enum class ErrorKind : std::uint8_t {
#define LIFECORE_ERROR_KIND_ENUM(kind, python_name) kind,
  LIFECORE_ERROR_KINDS(LIFECORE_ERROR_KIND_ENUM)
#undef LIFECORE_ERROR_KIND_ENUM
};

constexpr std::size_t error_kind_count = 0
#define LIFECORE_ERROR_KIND_COUNT(kind, python_name) +1
    LIFECORE_ERROR_KINDS(LIFECORE_ERROR_KIND_COUNT)
#undef LIFECORE_ERROR_KIND_COUNT
    ;

// The Python class names in table order. The bindings look a class up by a kind's value,
// so the check below proves, at compile time, that each row sits at its kind's value.
inline constexpr std::array<std::string_view, error_kind_count> error_class_names{{
#define LIFECORE_ERROR_KIND_NAME(kind, python_name) python_name,
    LIFECORE_ERROR_KINDS(LIFECORE_ERROR_KIND_NAME)
#undef LIFECORE_ERROR_KIND_NAME
}};

constexpr bool error_class_names_follow_the_kinds() {
  std::size_t row = 0;
  bool ordered = true;
#define LIFECORE_ERROR_KIND_ROW(kind, python_name)                                         \
  ordered = ordered && static_cast<std::size_t>(ErrorKind::kind) == row &&                 \
            error_class_names[static_cast<std::size_t>(ErrorKind::kind)] == python_name; \
  ++row;
  LIFECORE_ERROR_KINDS(LIFECORE_ERROR_KIND_ROW)
#undef LIFECORE_ERROR_KIND_ROW
  return ordered && row == error_class_names.size();
}
static_assert(error_class_names_follow_the_kinds(), "LIFECORE_ERROR_KINDS and ErrorKind disagree");

// The Python class name of a kind ("LifecoreError" for an unknown value).
constexpr const char* error_class_name(ErrorKind kind) noexcept {
  const auto index = static_cast<std::size_t>(kind);
  return index < error_class_names.size() ? error_class_names[index].data() : "LifecoreError";  // literals
}

// Extra attributes set on the Python exception instance (e.g. DriverError.code).
using ErrorAttribute = std::pair<std::string, std::variant<std::int64_t, std::string, bool>>;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::vector<ErrorAttribute> attributes = {})
      : std::runtime_error(message), kind_(kind), message_(message), attributes_(std::move(attributes)) {}

  ErrorKind kind() const noexcept { return kind_; }
  // The whole message: what() ends at the first NUL, which a quoted name may hold.
  const std::string& message() const noexcept { return message_; }
  const std::vector<ErrorAttribute>& attributes() const noexcept { return attributes_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::vector<ErrorAttribute> attributes_;
};

[[noreturn]] inline void raise(ErrorKind kind, const std::string& message,
                               std::vector<ErrorAttribute> attributes = {}) {
  throw Error(kind, message, std::move(attributes));
}

}  // namespace lifecore
