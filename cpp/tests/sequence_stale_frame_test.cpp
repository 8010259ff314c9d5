// A frame hold naming a frame that is not the session's active frame is a stale authority:
// commit, abort and rollback_unsubmitted refuse it with StaleAuthority and change nothing, so
// the real frame's hold still finalizes normally.
#include <memory>
#include <string>
#include <variant>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;
using lifecore::test_support::error_of;

namespace {

void a_hold_for_another_frame_is_refused_and_changes_nothing() {
  auto c = test_support::kv_coordinator(16, 4);
  auto session = test_support::open_stepped_session(c, "r");
  auto frame = session->acquire_frame();
  CHECK(session->active_frame() == frame->frame_id());

  const std::uint64_t other = frame->frame_id() + 1;
  for (int operation = 0; operation < 3; ++operation) {
    FrameHold stale(session->state(), other, nullptr);
    ErrorKind kind = error_of([&] {
      if (operation == 0) stale.commit();
      if (operation == 1) stale.abort();
      if (operation == 2) stale.rollback_unsubmitted();
    });
    CHECK(kind == ErrorKind::StaleAuthority);
    std::string message;
    try {
      stale.commit();
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(test_support::contains(message, "is not the session's active frame"));
    CHECK(session->active_frame() == frame->frame_id());
    CHECK(session->phase() == SessionPhase::open);
    stale.drop();  // not its frame: dropping it poisons nothing
    CHECK(session->phase() == SessionPhase::open);
  }

  // A hold of another session's state cannot finalize this session's frame either.
  auto other_session = test_support::open_stepped_session(c, "s");
  auto theirs = other_session->acquire_frame();
  {
    FrameHold forged(session->state(), theirs->frame_id() + 7, nullptr);
    CHECK(error_of([&] { forged.commit(); }) == ErrorKind::StaleAuthority);
    forged.drop();
  }

  CHECK(frame->commit() == FrameDisposition::committed);
  CHECK(theirs->commit() == FrameDisposition::committed);
  CHECK(session->phase() == SessionPhase::open && other_session->phase() == SessionPhase::open);
}

}  // namespace

int main() {
  a_hold_for_another_frame_is_refused_and_changes_nothing();
  return test_support::finish("sequence_stale_frame_test");
}
