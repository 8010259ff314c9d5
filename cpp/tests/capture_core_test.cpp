// C++-only checks of the capture core: SHA-256 vectors, the monotone ledger, bounded
// messages, and a session driven through a scripted backend.
#include <cstdio>
#include <string>

#include "capture/capture_json.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/ledger.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::capture;

namespace {

class ScriptedBackend final : public CaptureBackend {
 public:
  int transforms = 0;
  std::vector<std::uint64_t> shape(TensorHandle) override { return {2, 3}; }
  ValueDtype dtype(TensorHandle) override { return ValueDtype::Floating; }
  CaptureUsage estimate(TensorHandle, const TransformRequest&) override { return {1, 48, 24, 400}; }
  CapturePayload transform(TensorHandle, const TransformRequest&) override {
    ++transforms;
    CapturePayload p;
    p.kind = PayloadKind::Summary;
    p.count = 6;
    return p;
  }
  TensorHandle intervene(TensorHandle t, const InterventionRequest&) override { return t; }
};

void ledger_is_monotone_and_all_or_nothing() {
  CaptureLimits limits{{2, 100, 100, 100}, {3, 1000, 1000, 1000}, std::nullopt, OnLimit::Fail};
  CaptureLedger ledger(limits, {});
  CHECK(!ledger.try_reserve({1, 10, 10, 10}));
  auto hit = ledger.try_reserve({0, 0, 0, 91});
  CHECK(hit && hit->budget == Budget::Encoded && !hit->cumulative);
  CHECK(ledger.cumulative() == (CaptureUsage{1, 10, 10, 10}));
  ledger.begin_step();
  CHECK(!ledger.try_reserve({1, 0, 0, 0}));
  hit = ledger.try_reserve({2, 0, 0, 0});  // per-step is checked first
  CHECK(hit && hit->budget == Budget::Captures && !hit->cumulative);
  ledger.begin_step();
  hit = ledger.try_reserve({2, 0, 0, 0});
  CHECK(hit && hit->budget == Budget::Captures && hit->cumulative);
  CHECK(ledger.cumulative() == (CaptureUsage{2, 10, 10, 10}));
  bool threw = false;
  try {
    CaptureLedger child(limits, {4, 0, 0, 0});
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::BudgetExceeded;
  }
  CHECK(threw);
}

void bounded_messages_cut_on_utf8_boundaries() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "\xc3\xa9";  // é, two bytes each
  auto cut = bound_message("x" + text);
  CHECK(cut.size() <= 256);
  CHECK(cut.size() == 255);  // "x" + 127 whole characters
}

void counting_writer_measures_what_the_writer_writes() {
  CaptureRecord record;
  record.selection_id = "quote\" back\\slash \x01 control \xc3\xa9";
  record.path = "p";
  record.source_shape = {1, 2, 3};
  record.outcome.kind = OutcomeKind::Failed;
  record.outcome.message = "tab\there";
  record.payload.kind = PayloadKind::Tensor;
  record.payload.values = {1.5, -2e-300, 1e300, 0.0};
  JsonWriter full, counted(UINT64_MAX, true);
  write_record(full, record);
  write_record(counted, record);
  CHECK(full.size() == counted.size() && full.take().size() == counted.size());
  JsonWriter limited(counted.size() - 1, true);
  write_record(limited, record);
  CHECK(limited.overflowed());
}

void session_round_trip() {
  CaptureDiscovery discovery{"artifact", {ObservationPoint{"p", "p", "activation", ValueDtype::Floating,
                                                          {{"a", {DimKind::Known, 2}}, {"b", {DimKind::Known, 3}}}}},
                             {}};
  CaptureUsage big{100, 1u << 30, 1u << 30, 1u << 30};
  CapturePlan plan{capture_schema_version, {CaptureSelection{"s", "p", {}, {}, {}}}, {big, big, std::nullopt, OnLimit::Fail}};
  CaptureSession session(admit(plan, discovery, {1, 1, 3}));
  ScriptedBackend backend;
  int tensor = 0;
  session.begin_step(CapturePhase::Prefill, 0);
  session.observe(backend, "p", &tensor);
  session.observe(backend, "elsewhere", &tensor);
  auto step = session.take_step();
  CHECK(step && step->records.size() == 1 && step->records[0].outcome.kind == OutcomeKind::Captured);
  CHECK(backend.transforms == 1);
  auto cp = session.checkpoint(discovery);
  session.begin_step(CapturePhase::Decode, 1);
  session.take_step();
  auto spent = session.cumulative_usage();
  {
    auto prepared = session.prepare_restore(cp);
    // dropped without commit
  }
  CHECK(session.next_prediction() == 2);
  session.restore(cp);
  CHECK(session.next_prediction() == 1 && session.cumulative_usage() == spent && !session.take_step());
}

}  // namespace

int main() {
  ledger_is_monotone_and_all_or_nothing();
  bounded_messages_cut_on_utf8_boundaries();
  counting_writer_measures_what_the_writer_writes();
  session_round_trip();
  return lifecore::test_support::finish("capture_core_test");
}
