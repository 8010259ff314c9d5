// Adapts a Python backend object (shape / dtype / estimate / transform / intervene, and the
// optional describe / summary_statistics / replacement_mismatch) to the core's CaptureBackend protocol. Constructing one costs nothing: a skipped point never
// reaches any of these calls. Results of `intervene` are kept alive until the session call
// returns, because the core only sees opaque handles.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <nanobind/nanobind.h>

#include "lifecore/capture/backend.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

// The first Python exception a backend or estimator raised during one session call, and the
// text the core carries for it: when the call's error names that text, the Python exception
// becomes its __cause__ instead of being lost.
struct PythonCause {
  nb::object exception;
  std::string text;
  void record(nb::handle value, const std::string& message) {
    if (exception) return;
    exception = nb::borrow(value);
    text = message;
  }
};

// Raises `error` as its lifecore exception class with `cause` as __cause__ when the error
// carries the cause's text; otherwise rethrows it unchanged (the usual translation).
[[noreturn]] void raise_keeping_cause(const Error& error, const PythonCause& cause);

// A backend or estimator that raised a BaseException which is not an Exception (KeyboardInterrupt,
// SystemExit) fails its record like any native failure, so the session stays consistent; the
// exception is held here, on the calling thread, until the session call returns and it is
// re-raised unchanged. Until then no backend is called again.
bool interrupt_pending();
void hold_interrupt(nb::handle exception);
void drop_interrupt();
// Re-raises a held interrupt (as a Python exception), if there is one.
void raise_held_interrupt();

// Runs a session call; an Error it throws keeps the backend's Python exception as __cause__,
// and an interrupt a backend raised is raised in its place, whatever the call did.
template <class F>
decltype(auto) keeping_cause(const PythonCause& cause, F&& call) {
  drop_interrupt();  // one left by a call that did not end here
  try {
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      raise_held_interrupt();
    } else {
      decltype(auto) result = call();
      raise_held_interrupt();
      return result;
    }
  } catch (const Error& error) {
    raise_held_interrupt();
    raise_keeping_cause(error, cause);
  } catch (...) {
    raise_held_interrupt();  // an interrupt outranks whatever else ended the call
    throw;
  }
}

// Refuses (LifecoreTypeError naming `call` and `argument`) what cannot serve as a capture
// backend, one without a callable `transform`, before a point is looked at: a wrong object
// changes nothing. The last type accepted is remembered, so a hot path pays one compare.
void require_capture_backend(nb::handle backend, const char* call, const char* argument);

class PythonCaptureBackend final : public capture::CaptureBackend {
 public:
  explicit PythonCaptureBackend(nb::handle backend) : backend_(backend) {}
  std::optional<capture::TensorFacts> describe(capture::TensorHandle tensor) override;
  std::vector<std::uint64_t> shape(capture::TensorHandle tensor) override;
  capture::ValueDtype dtype(capture::TensorHandle tensor) override;
  capture::CaptureUsage estimate(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  capture::CapturePayload transform(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  std::uint64_t native_bytes(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  capture::TensorHandle intervene(capture::TensorHandle tensor, const capture::InterventionRequest& request) override;
  std::optional<std::string> replacement_mismatch(capture::TensorHandle original,
                                                  capture::TensorHandle replacement) override;
  std::vector<nb::object>& kept() { return kept_; }
  const PythonCause& cause() const { return cause_; }
  // An adapter kept across session calls forgets the previous call's exception.
  void reset_cause() { cause_ = {}; }

 private:
  nb::object request_object(const capture::TransformRequest& request);
  nb::handle backend_;
  int describes_ = -1;  // whether the backend offers describe (-1: not asked yet)
  int summarizes_ = -1;  // whether it offers summary_statistics (-1: not asked yet)
  PythonCause cause_;
  std::vector<nb::object> kept_;
  std::uint64_t cached_serial_ = 0;  // the request converted last, reused by serial
  nb::object cached_request_;
};

class PythonInterventionEstimator final : public capture::InterventionEstimator {
 public:
  explicit PythonInterventionEstimator(nb::object estimator) : estimator_(std::move(estimator)) {}
  ~PythonInterventionEstimator() override {
    nb::gil_scoped_acquire gil;
    estimator_.reset();
  }
  capture::CaptureUsage estimate(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  // The Python estimator, for the session type's garbage-collector traversal.
  nb::handle object() const { return estimator_; }
  // Breaks a reference cycle (the collector's tp_clear): later estimates fail as natively.
  void clear() { estimator_ = nb::none(); }

 private:
  // No PythonCause here: the estimator lives as long as its session, and a kept exception
  // (with its traceback's frames) would hold objects the collector cannot see.
  nb::object estimator_;
};

// Converts what a backend's `estimate` returned; None or anything else is a failure.
capture::CaptureUsage usage_from_python(nb::handle value);

}  // namespace lifecore::bindings
