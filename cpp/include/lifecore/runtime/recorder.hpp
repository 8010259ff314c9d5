// How a capture window records a stream's work, and the sealed recording a Graph launches.
// Each stream has one recorder, chosen by its device's graphs mode:
//   driver capture (driver_recorder.cpp): the stream keeps issuing to the driver, which
//     captures; the recording is the driver's executable graph;
//   op list (op_list_recorder.cpp): the runtime keeps the stream's fills, copies and launches
//     and a replay re-issues them; host work (write, read, sync, profile, replay) cannot be
//     part of such a recording.
// The stream brackets every window the same way (StreamCaptureState, pools, info cache, error
// queue) and asks its recorder only what differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

using Staging = std::shared_ptr<const std::vector<std::uint8_t>>;

// A sealed window: what a Graph launches, one way whatever recorded it.
class Recording {
 public:
  virtual ~Recording() = default;
  virtual bool in_driver() const noexcept = 0;
  // Driver nodes, or recorded operations.
  virtual std::size_t node_count() const noexcept = 0;
  // Issues the recorded work on `stream`; the first driver failure is returned.
  virtual driver::Status launch(driver::Driver& driver, driver::StreamHandle stream) = 0;
  // Ahead of the first launch; an optimisation whose failure costs nothing.
  virtual void upload(driver::Driver& driver, driver::StreamHandle stream) noexcept = 0;
  // Destroys the driver's objects (the device is still open); never fails.
  virtual void release(driver::Driver& driver) noexcept = 0;
};

// Why an ended window could not be sealed (CaptureRefusedError's message and cause).
struct SealRefusal {
  std::string message;
  std::string cause;
  std::optional<driver::Status> status;
};

class Recorder {
 public:
  virtual ~Recorder() = default;

  // True when the driver sees the window's work: host waits, fences and allocations issued
  // inside the window then become part of the capture (or invalidate it).
  virtual bool in_driver() const noexcept = 0;
  // Why host work named `op` cannot be part of this recording; empty when the driver takes it
  // as it comes (and judges it).
  virtual std::string host_work_refusal(const char* op) const = 0;

  // Opens the window; the stream has flushed its warmup.
  virtual driver::Status begin(driver::CaptureMode mode) = 0;
  // The stream's own operations inside the window: recorded, or issued for the driver to capture.
  virtual driver::Status fill(driver::DevicePtr dst, std::uint32_t value, std::size_t count) = 0;
  virtual driver::Status copy(driver::DevicePtr dst, driver::DevicePtr src, std::size_t bytes) = 0;
  virtual driver::Status launch(driver::FunctionHandle function, driver::Dim3 grid, driver::Dim3 block,
                                const std::vector<driver::KernelArg>& args) = 0;
  // Host memory the window's work reads at every replay: the recording keeps it.
  virtual void retain(Staging staging) = 0;

  // Ends the window, keeping its result for seal(); how the end went.
  virtual driver::Status end() = 0;
  // The ended window as a Recording, or null with *refusal said (the result is kept for discard()).
  virtual std::unique_ptr<Recording> seal(SealRefusal* refusal) = 0;
  // Drops whatever the window recorded or end() kept; never fails.
  virtual void discard() noexcept = 0;

  // The driver's side of the window: whether the driver still captures on the stream.
  virtual bool driver_capturing() const noexcept = 0;
  // Ends the driver's capture of a window that is being undone, dropping what it captured;
  // driver_capturing() says afterwards whether the driver still captures.
  virtual driver::Status abandon() = 0;
  // The driver's capture went with its device or context: forget it without ending it.
  virtual void forget() noexcept = 0;
};

std::unique_ptr<Recorder> make_driver_recorder(driver::Driver& driver, driver::StreamHandle stream);
std::unique_ptr<Recorder> make_op_list_recorder();

}  // namespace lifecore::runtime
