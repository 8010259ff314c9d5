// The admission coordinator's last line of defence: when its accounting finds itself
// inconsistent (more pages or sequences released than it handed out) it is poisoned, and every
// later decision refuses with a capacity error instead of admitting against wrong numbers.
// Released capacity never goes below zero.
#include <cstdio>
#include <memory>
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

std::shared_ptr<AdmissionCoordinator> make(std::uint64_t pages) { return lifecore::test_support::kv_coordinator(pages, 4); }

bool admits(AdmissionCoordinator& c, const char* id) {
  auto decision = c.admit({id, 16, 16, {}});
  return std::holds_alternative<Admitted>(decision);
}

void releasing_pages_never_handed_out_poisons() {
  auto c = make(8);
  CHECK(admits(*c, "before"));
  const auto used = c->capacity().domains[0].used_bytes;
  c->release_pages({0}, 100);  // far more than is used
  CHECK(c->capacity().domains[0].used_bytes == used);  // not wrapped below zero
  CHECK(error_of([&] { c->admit({"after", 16, 16, {}}); }) == ErrorKind::Capacity);
}

void releasing_a_sequence_that_is_not_active_poisons() {
  auto c = make(8);
  c->release_sequence({0}, 0, Authority{}, Authority{}, "none");  // no sequence is active
  CHECK(error_of([&] { c->admit({"after", 16, 16, {}}); }) == ErrorKind::Capacity);
}

void a_session_of_a_poisoned_coordinator_cannot_extend() {
  auto c = make(8);
  auto decision = c->admit({"r", 16, 64, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  CHECK(admitted != nullptr);
  if (admitted == nullptr) return;
  auto session = admitted->resources->open_session();
  admitted->resources.reset();
  c->release_pages({0}, 100);
  CHECK(error_of([&] { session->try_ensure_backing_covers(48); }) == ErrorKind::Capacity);
  session->request_cancel();  // still usable: it can end
  CHECK(session->try_abort().outcome == TerminalOutcome::aborted);
}

void a_consistent_release_does_not_poison() {
  auto c = make(8);
  auto decision = c->admit({"r", 16, 16, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  CHECK(admitted != nullptr);
  if (admitted == nullptr) return;
  auto session = admitted->resources->open_session();
  admitted->resources.reset();
  CHECK(session->step(16) == BackingOutcome::current);
  CHECK(session->try_complete().outcome == TerminalOutcome::completed);
  session.reset();
  CHECK(c->capacity().domains[0].used_bytes == 0);
  CHECK(admits(*c, "again"));  // the exact release left it healthy
}

}  // namespace

int main() {
  releasing_pages_never_handed_out_poisons();
  releasing_a_sequence_that_is_not_active_poisons();
  a_session_of_a_poisoned_coordinator_cannot_extend();
  a_consistent_release_does_not_poison();
  return lifecore::test_support::finish("sequence_coordinator_poison_test");
}
