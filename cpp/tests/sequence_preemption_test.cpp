// Preemption by recompute without Python: a deferred extension frees exactly the victims it
// needs (the youngest first, as given), skips what it may not touch (another coordinator's
// session, a session with a live frame, its own sequence) with the reason, reports the sources
// whose epochs advanced, and a victim's capacity is back once its session closed (runs under
// the sanitizers).
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/preemption.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;
using lifecore::test_support::error_of;

namespace {

std::shared_ptr<AdmissionCoordinator> make(std::uint64_t pages) { return lifecore::test_support::kv_coordinator(pages); }

std::unique_ptr<SequenceSession> open(AdmissionCoordinator& c, const std::string& id, std::int64_t prompt,
                                      std::int64_t fit = 4 * 16) {
  auto decision = c.admit({id, prompt, fit, {}});
  return std::get<Admitted>(decision).resources->open_session();
}

void a_deferred_step_preempts_the_youngest_it_needs() {
  auto c = make(4);
  auto other = make(2);
  auto head = open(*c, "head", 16);
  auto middle = open(*c, "middle", 16);
  auto young = open(*c, "young", 32);  // every page is taken now
  auto foreign = open(*other, "foreign", 16, 32);
  auto filler = open(*other, "filler", 16, 16);  // the other coordinator is full too
  CHECK(head->step(17) == BackingOutcome::backing_deferred);
  const auto deferred = head->step_deferral();
  CHECK(deferred.has_value());

  // A live frame keeps `young` out of reach: skipped, never half-changed.
  auto frame = young->acquire_frame();
  auto out = preempt_for(*c, *deferred, {foreign.get(), head.get(), young.get(), middle.get()}, std::nullopt);
  // Every candidate not picked, in order: the foreign session, head (the sequence that asked
  // to grow), young (not quiescent).
  CHECK(out.skipped.size() == 3);
  CHECK(out.skipped[0].authority == foreign->sequence_authority());
  CHECK(out.skipped[1].authority == head->sequence_authority() &&
        out.skipped[1].reason.find("asked to grow") != std::string::npos);
  CHECK(out.skipped[2].authority == young->sequence_authority() && !out.skipped[2].reason.empty());
  CHECK(young->phase() == SessionPhase::open);
  CHECK(out.victims.size() == 1 && out.victims[0] == middle->sequence_authority());  // its own sequence is never one
  CHECK(out.receipts.size() == 1 && out.receipts[0].outcome == TerminalOutcome::aborted);
  CHECK(middle->is_closed() && out.satisfied && out.freed_sources.size() == 1);
  CHECK(head->step(17) == BackingOutcome::extended);
  frame->commit();

  // A limit of 0 picks no victim and changes nothing.
  CHECK(head->step(18) == BackingOutcome::current);
  CHECK(young->step(33) == BackingOutcome::backing_deferred);
  const auto again = young->step_deferral();
  auto none = preempt_for(*c, *again, {head.get()}, std::size_t{0});
  CHECK(none.victims.empty() && !none.satisfied && head->phase() == SessionPhase::open);
  CHECK(none.skipped.size() == 1 && none.skipped[0].reason.find("limit") != std::string::npos);
  // A deferral of another coordinator is refused before anything changes.
  CHECK(foreign->step(17) == BackingOutcome::backing_deferred);
  CHECK(error_of([&] { preempt_for(*c, *foreign->step_deferral(), {head.get()}, std::nullopt); }) ==
        ErrorKind::StaleAuthority);
  CHECK(head->phase() == SessionPhase::open);
}

// A backing deferral names the sequence that asked to grow. Once that sequence is gone (aborted
// and closed), its demand is nobody's: preempting live sequences for it only destroys work.
void a_deferral_of_a_sequence_that_is_gone_preempts_nothing() {
  auto c = make(4);
  auto asker = open(*c, "asker", 16, 64);  // one page now, four at most
  auto a = open(*c, "a", 16, 16);
  auto b = open(*c, "b", 16, 16);
  auto d = open(*c, "d", 16, 16);  // every page is taken now
  CHECK(asker->step(64) == BackingOutcome::backing_deferred);
  const auto deferred = asker->step_deferral();
  CHECK(deferred.has_value() && deferred->backing.has_value());
  asker->request_cancel();
  asker->try_abort();
  asker->close();  // its page is back; the three it asked for are not free
  CHECK(error_of([&] { c->verify_sequence_authority(deferred->backing->sequence_authority); }) ==
        ErrorKind::StaleAuthority);
  CHECK(error_of([&] { preempt_for(*c, *deferred, {a.get(), b.get(), d.get()}, std::nullopt); }) ==
        ErrorKind::StaleAuthority);
  CHECK(a->phase() == SessionPhase::open && b->phase() == SessionPhase::open && d->phase() == SessionPhase::open);
  CHECK(c->capacity().active_sequences == 3);
}

// An admission whose fit exceeds what its domain holds today waits for growth: no release can
// admit it, so it does not fit now, and no victim can help it.
void an_admission_that_needs_growth_neither_fits_nor_preempts() {
  CoordinatorConfig config;
  config.domains.push_back({"kv", 2 * 4096, 8 * 4096});  // two pages now, eight at most
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 8;
  auto c = AdmissionCoordinator::create(std::move(config));
  auto a = open(*c, "a", 16, 16);
  auto deferred = std::get<AdmissionDeferred>(c->admit({"grows", 16, 64, {}}));  // one page now, four at most
  CHECK(deferred.action == DeferralAction::await_backing_growth);
  CHECK(!c->fits_now(deferred));
  CHECK(std::holds_alternative<AdmissionDeferred>(c->admit({"grows", 16, 64, {}})));
  auto out = preempt_for(*c, deferred, {a.get()}, std::nullopt);
  CHECK(out.victims.empty() && !out.satisfied && a->phase() == SessionPhase::open);
  c->grow_domain("kv", 8 * 4096);
  CHECK(c->fits_now(deferred));
  CHECK(std::holds_alternative<Admitted>(c->admit({"grows", 16, 64, {}})));
}

}  // namespace

int main() {
  a_deferred_step_preempts_the_youngest_it_needs();
  a_deferral_of_a_sequence_that_is_gone_preempts_nothing();
  an_admission_that_needs_growth_neither_fits_nor_preempts();
  return lifecore::test_support::finish("sequence_preemption_test");
}
