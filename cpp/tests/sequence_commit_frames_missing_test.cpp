// commit_frames refuses a missing frame (a null pointer in the batch) with InvalidArgument
// naming its row, before any frame commits.
// The Python binding refuses None before the core sees it, so only a C++ caller reaches this.
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;

namespace {

void a_missing_frame_is_refused_by_its_row() {
  auto c = test_support::kv_coordinator(16, 4);
  auto first = test_support::open_stepped_session(c, "a");
  auto last = test_support::open_stepped_session(c, "b");
  auto first_frame = first->acquire_frame();
  auto last_frame = last->acquire_frame();

  const std::vector<FrameHold*> frames{first_frame.get(), nullptr, last_frame.get()};
  FrameDisposition out[3] = {FrameDisposition::aborted, FrameDisposition::aborted, FrameDisposition::aborted};
  std::string message;
  bool invalid = false;
  try {
    commit_frames(frames, out);
  } catch (const Error& e) {
    invalid = e.kind() == ErrorKind::InvalidArgument;
    message = e.what();
  }
  CHECK(invalid);
  CHECK(test_support::contains(message, "commit_frames: a frame is missing"));
  CHECK(test_support::contains(message, "row 1"));
  CHECK(test_support::contains(message, "no frame was committed"));
  CHECK(out[0] == FrameDisposition::aborted);  // nothing written
  CHECK(first->active_frame() == first_frame->frame_id());  // the row before it did not commit
  CHECK(last->active_frame() == last_frame->frame_id());
  CHECK(first_frame->commit() == FrameDisposition::committed);
  CHECK(last_frame->commit() == FrameDisposition::committed);
}

}  // namespace

int main() {
  a_missing_frame_is_refused_by_its_row();
  return test_support::finish("sequence_commit_frames_missing_test");
}
