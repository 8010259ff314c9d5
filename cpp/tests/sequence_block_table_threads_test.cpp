// Block tables read while their sessions extend on other threads. A session's row is read
// under the session's lock only, from the id storage the backing uses now, which moves (it
// doubles) only under that same lock: every row read must be a prefix of the sequence's final
// ids, padded, and never read freed storage (the sanitizers watch that).
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <variant>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;

namespace {

constexpr std::size_t sequences = 4;
constexpr std::uint64_t fit_pages = 200;  // storage grows 16 -> 32 -> 64 -> 128 -> 200
constexpr std::int32_t pad = -1;

void rows_read_during_extensions_are_prefixes_of_the_final_ids() {
  auto c = test_support::kv_coordinator(sequences * fit_pages, sequences);
  std::vector<std::unique_ptr<SequenceSession>> sessions;
  for (std::size_t i = 0; i < sequences; ++i) {
    auto decision = c->admit({"s" + std::to_string(i), 1, static_cast<std::int64_t>(fit_pages * 16), {}});
    auto* admitted = std::get_if<Admitted>(&decision);
    CHECK(admitted != nullptr);
    if (!admitted) return;
    sessions.push_back(admitted->resources->open_session());
  }
  std::vector<BlockTableRow> rows(sequences);
  for (std::size_t i = 0; i < sequences; ++i) rows[i].session = sessions[i].get();

  std::atomic<bool> done{false}, reading{false};
  std::vector<std::vector<std::int32_t>> seen;  // tables read meanwhile
  std::thread reader([&] {
    std::vector<std::int32_t> table(sequences * fit_pages, 12345);
    do {
      build_block_table(*c, rows, std::nullopt, fit_pages, pad, table.data(), /*in_place=*/true);
      if (seen.size() < 4000) seen.push_back(table);
      reading.store(true);
    } while (!done.load());
  });
  std::vector<std::thread> extenders;
  for (std::size_t i = 0; i < sequences; ++i)
    extenders.emplace_back([&, i] {
      // Not before the reader runs: on a loaded machine it could otherwise start after them all.
      while (!reading.load()) std::this_thread::yield();
      for (std::int64_t tokens = 2; tokens <= static_cast<std::int64_t>(fit_pages * 16); tokens += 16)
        CHECK(sessions[i]->step(tokens) != BackingOutcome::backing_deferred);
    });
  for (auto& t : extenders) t.join();
  done.store(true);
  reader.join();

  CHECK(!seen.empty());
  for (std::size_t i = 0; i < sequences; ++i) {
    const BlockIds final_ids = sessions[i]->backing()->block_ids(0);
    CHECK(final_ids.count == fit_pages);
    for (const auto& table : seen) {
      const std::int32_t* row = table.data() + i * fit_pages;
      std::size_t k = 0;
      for (; k < fit_pages && row[k] != pad; ++k) CHECK(row[k] == final_ids.data.get()[k]);
      CHECK(k >= 1);  // the prompt's block at least
      for (; k < fit_pages; ++k) CHECK(row[k] == pad);
    }
  }
}

}  // namespace

int main() {
  rows_read_during_extensions_are_prefixes_of_the_final_ids();
  return lifecore::test_support::finish("sequence_block_table_threads_test");
}
