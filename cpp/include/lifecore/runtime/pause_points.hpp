// The runtime's pause points (lifecore/pause_points.hpp), for tests of the races between a
// device's close() and the calls that make or release driver objects on it (a stream, a
// module, a graph, an info buffer).
#pragma once

#include <cstdint>

#include "lifecore/pause_points.hpp"

namespace lifecore::runtime {

enum class PausePoint : std::uint8_t {
  stream_made,           // Device::stream: the driver stream is made, not yet known to close()
  stream_dropped,        // Stream::~Stream: the last reference went, the stream not yet shut down
  close_took_streams,    // Device::close: the streams to shut down are taken, the device not yet closed
  device_marked_closed,  // Device::close: the device is marked closed, its memory and modules not returned yet
  module_loaded,         // Device::load_module: the driver module is loaded, not yet known to close()
  cleanup_took_info,     // Device::cleanup: unpinned info buffers are out of the cache, not yet freed
  graph_destroy_waited,  // Graph::destroy: the graph is taken, its streams waited for, its driver objects kept
};

// pause_points::arm(pause_points::Point::stream_made), pause_points::reach(...), ...
using pause_points = PausePoints<PausePoint>;

}  // namespace lifecore::runtime
