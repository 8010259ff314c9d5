// Shared checks for the C++ test programs: each failed check is reported with its place and
// expression and counted, so a program runs every check and then exits non-zero via finish().
#pragma once

#include <cstdio>
#include <string>

#include "lifecore/driver/registry.hpp"
#include "lifecore/error.hpp"

namespace lifecore::test_support {

inline int failures = 0;

inline void fail_check(const char* file, int line, const char* expression) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expression);
  ++failures;
}

// Generic over the status type so this header needs no vendor include; it reads the fields a
// vendor Status carries (code, name, call, message) to say which call failed and how.
template <typename StatusLike>
void check_ok(const StatusLike& status, const char* file, int line, const char* expression) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s %d %s %s\n", file, line, expression, status.call.c_str(),
               status.native_code, status.name.c_str(), status.message.c_str());
  ++failures;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline void expect_equal(const std::string& got, const std::string& want, const char* what) {
  if (got == want) return;
  std::fprintf(stderr, "FAIL %s\n  got  %s\n  want %s\n", what, got.c_str(), want.c_str());
  ++failures;
}

// The kind of lifecore::Error that f() throws; ErrorKind::Lifecore (the base kind, which the
// core never throws) when it throws nothing.
template <typename F>
ErrorKind error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Lifecore;
}

// The first registered backend that is an emulated device on host memory with fault injection
// and the test hooks: the tests that need those ask for the role, not for a backend's name.
// Throws BackendUnavailable when no backend takes that role.
inline std::string emulated_backend() {
  for (const driver::BackendDescriptor* backend : driver::registered_backends())
    if (backend->emulated) return backend->name;
  raise(ErrorKind::BackendUnavailable, "no registered backend is an emulated device (BackendDescriptor::emulated)");
}

// The value main() returns: 0 when every check passed, 1 otherwise, with a one-line summary.
inline int finish(const char* program) {
  if (failures) {
    std::fprintf(stderr, "%s: %d check(s) failed\n", program, failures);
    return 1;
  }
  std::printf("%s: ok\n", program);
  return 0;
}

}  // namespace lifecore::test_support

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) ::lifecore::test_support::fail_check(__FILE__, __LINE__, #cond); \
  } while (0)

#define CHECK_OK(expr) ::lifecore::test_support::check_ok((expr), __FILE__, __LINE__, #expr)
