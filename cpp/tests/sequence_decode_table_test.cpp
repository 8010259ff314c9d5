// The decode table without Python: under seeded random admissions, steps, releases and row
// changes it holds exactly what build_block_table writes for the same rows, writes only what
// changed, and an error writes nothing (runs under the sanitizers).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/decode_table.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;
using lifecore::test_support::error_of;

namespace {

constexpr std::size_t rows = 5, width = 8;
constexpr std::int32_t pad = -1;

std::shared_ptr<AdmissionCoordinator> make(std::uint64_t pages) { return lifecore::test_support::kv_coordinator(pages); }

// What build_block_table writes for the rows that show a session, pad elsewhere.
std::vector<std::int32_t> expected(const AdmissionCoordinator& c, const std::vector<std::unique_ptr<SequenceSession>>& s) {
  std::vector<std::int32_t> out(rows * width, pad);
  for (std::size_t r = 0; r < rows; ++r) {
    if (!s[r]) continue;
    BlockTableRow row;
    row.session = s[r].get();
    build_block_table(c, {row}, std::nullopt, width, pad, out.data() + r * width);
  }
  return out;
}

void matches_block_table_under_random_operations(unsigned seed) {
  auto c = make(24);
  std::vector<std::int32_t> data(rows * width, 12345);
  DecodeTable table(c, 0, rows, width, pad, data.data());
  CHECK(data == std::vector<std::int32_t>(rows * width, pad));
  std::vector<std::unique_ptr<SequenceSession>> sessions(rows);
  std::vector<std::int64_t> tokens(rows, 0);
  std::mt19937 rnd(seed);
  int admitted = 0;
  for (int i = 0; i < 400; ++i) {
    const std::size_t r = rnd() % rows;
    const unsigned op = rnd() % 10;
    if (op < 3 && !sessions[r]) {
      const std::int64_t prompt = 1 + static_cast<std::int64_t>(rnd() % 40);
      auto decision = c->admit({"s" + std::to_string(++admitted), prompt, static_cast<std::int64_t>(width * 16), {}});
      if (auto* a = std::get_if<Admitted>(&decision)) {
        sessions[r] = a->resources->open_session();
        tokens[r] = prompt;
      }
    } else if (op < 5 && sessions[r]) {
      sessions[r].reset();  // released: the row must not keep showing its ids
    } else if (op < 6) {
      const std::size_t other = rnd() % rows;
      std::swap(sessions[r], sessions[other]);
      std::swap(tokens[r], tokens[other]);
    } else if (sessions[r] && tokens[r] < static_cast<std::int64_t>(width * 16)) {
      sessions[r]->step(++tokens[r]);  // may be deferred when the domain is full
    }
    std::vector<const SequenceSession*> given;
    for (const auto& s : sessions) given.push_back(s.get());
    const auto before = data;
    table.update(given);
    const auto want = expected(*c, sessions);
    CHECK(data == want);
    std::uint64_t changed = 0;
    for (std::size_t k = 0; k < data.size(); ++k) changed += before[k] != want[k];
    CHECK(table.last_written() >= changed);
    table.update(given);
    CHECK(table.last_written() == 0);
  }
}

void step_writes_only_new_ids_and_errors_write_nothing() {
  auto c = make(64);
  auto other = make(8);
  std::vector<std::unique_ptr<SequenceSession>> s;
  for (int i = 0; i < 3; ++i) {
    auto d = c->admit({"r" + std::to_string(i), 16, 16 * 16, {}});
    s.push_back(std::get<Admitted>(d).resources->open_session());
  }
  auto f = other->admit({"f", 16, 16, {}});
  auto foreign = std::get<Admitted>(f).resources->open_session();
  std::vector<std::int32_t> data(3 * 4);
  DecodeTable table(c, 0, 3, 4, pad, data.data());
  std::vector<SequenceSession*> batch{s[0].get(), s[1].get(), s[2].get()};
  std::vector<std::int64_t> tokens{16, 17, 33};
  std::vector<BackingOutcome> outcomes(3);
  table.step(batch, tokens.data(), outcomes.data());
  CHECK(outcomes[0] == BackingOutcome::current && outcomes[1] == BackingOutcome::extended &&
        outcomes[2] == BackingOutcome::extended);
  CHECK(table.last_written() == 1 + 2 + 3);
  tokens = {17, 18, 34};
  table.step(batch, tokens.data(), outcomes.data());
  CHECK(table.last_written() == 1);  // row 0 grew by one block
  const auto before = data;
  CHECK(error_of([&] { table.update({s[0].get(), foreign.get()}); }) == ErrorKind::StaleAuthority);
  CHECK(error_of([&] { table.update({s[0].get(), s[1].get(), s[2].get(), s[0].get()}); }) ==
        ErrorKind::InvalidArgument);
  for (int t = 35; t <= 80; ++t) s[2]->step(t);  // 5 blocks: wider than the table
  CHECK(error_of([&] { table.update({s[0].get(), s[1].get(), s[2].get()}); }) == ErrorKind::InvalidArgument);
  s[1]->close();
  CHECK(error_of([&] { table.update({s[0].get(), s[1].get()}); }) == ErrorKind::Closed);
  CHECK(data == before);
  table.update({s[0].get()});  // rows 1 and 2 show nothing now
  for (std::size_t k = 4; k < data.size(); ++k) CHECK(data[k] == pad);
}

// A row grown past the table by another thread while its own step's extension was prepared is
// refused after it stepped (DecodeTable::check after step_with_source); the refusal says whether
// rows before it stepped and were written.
void a_row_grown_past_the_width_during_its_step_is_refused_after_it_stepped() {
  for (std::size_t at : {std::size_t{0}, std::size_t{1}}) {
    auto c = make(64);
    std::vector<std::unique_ptr<SequenceSession>> s;
    for (int i = 0; i < 2; ++i) {
      auto d = c->admit({"r" + std::to_string(i), 16, 16 * 16, {}});
      s.push_back(std::get<Admitted>(d).resources->open_session());
    }
    std::vector<std::int32_t> data(2 * 2, pad);
    DecodeTable table(c, 0, 2, 2, pad, data.data());
    std::vector<SequenceSession*> batch{s[0].get(), s[1].get()};
    std::vector<std::int64_t> tokens{16, 16};
    tokens[at] = 17;  // row `at` extends to 2 blocks, within the width
    std::vector<BackingOutcome> outcomes(2);
    pause_points::arm(pause_points::Point::extension_prepared);
    std::string what;
    std::thread stepper([&] {
      try {
        table.step(batch, tokens.data(), outcomes.data());
      } catch (const Error& e) {
        what = e.what();
      }
    });
    CHECK(pause_points::wait_until_reached(10.0));
    s[at]->try_ensure_backing_covers(48);  // 3 blocks: wider than the table
    pause_points::resume();
    stepper.join();
    const std::string tail = at == 0 ? "(the row stepped, nothing was written)"
                                     : "(the rows up to it stepped; the table shows the rows before it)";
    CHECK(what.size() >= tail.size() && what.compare(what.size() - tail.size(), tail.size(), tail) == 0);
    CHECK(what.find("row " + std::to_string(at)) != std::string::npos);
  }
}

}  // namespace

int main() {
  for (unsigned seed = 0; seed < 6; ++seed) matches_block_table_under_random_operations(seed);
  step_writes_only_new_ids_and_errors_write_nothing();
  a_row_grown_past_the_width_during_its_step_is_refused_after_it_stepped();
  return lifecore::test_support::finish("sequence_decode_table_test");
}
