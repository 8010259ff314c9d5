// Adapts a Python backend object (shape / dtype / estimate / transform / intervene) to the
// core's CaptureBackend protocol. Constructing one costs nothing: a skipped point never
// reaches any of these calls. Results of `intervene` are kept alive until the session call
// returns, because the core only sees opaque handles.
#pragma once

#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "lifecore/capture/backend.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

class PythonCaptureBackend final : public capture::CaptureBackend {
 public:
  explicit PythonCaptureBackend(nb::handle backend) : backend_(backend) {}
  std::vector<std::uint64_t> shape(capture::TensorHandle tensor) override;
  capture::ValueDtype dtype(capture::TensorHandle tensor) override;
  capture::CaptureUsage estimate(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  capture::CapturePayload transform(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  std::uint64_t native_bytes(capture::TensorHandle tensor, const capture::TransformRequest& request) override;
  capture::TensorHandle intervene(capture::TensorHandle tensor, const capture::InterventionRequest& request) override;
  std::vector<nb::object>& kept() { return kept_; }

 private:
  nb::object request_object(const capture::TransformRequest& request);
  nb::handle backend_;
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

 private:
  nb::object estimator_;
};

// Converts what a backend's `estimate` returned; None or anything else is a failure.
capture::CaptureUsage usage_from_python(nb::handle value);

}  // namespace lifecore::bindings
