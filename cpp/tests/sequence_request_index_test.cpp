// The index of live request ids: against a plain map, under random inserts and erases with
// hashes chosen to collide (long probe runs, runs that wrap past the table's end), every id
// is found exactly while it is in, never after it left, and a second entry under a live id
// is refused and changes nothing; the table shrinks after a burst.
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/request_index.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;

namespace {

std::shared_ptr<AdmissionCoordinator> make() {
  CoordinatorConfig config;
  config.domains.push_back({"kv", 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 1;
  return AdmissionCoordinator::create(std::move(config));
}

// A backing never admitted (no authority): it claims nothing and returns nothing.
std::shared_ptr<SequenceBacking> backing(const std::shared_ptr<AdmissionCoordinator>& c, int k) {
  const auto domains = std::make_shared<const DomainSet>(DomainSet{c->shared_domain_names(), {0}});
  return std::make_shared<SequenceBacking>(c, domains, Authority{}, Authority{}, RequestId("r" + std::to_string(k)), 1);
}

void agrees_with_a_map_under_colliding_hashes(std::uint64_t (*hash_of)(int), const char* name) {
  auto c = make();
  std::vector<std::shared_ptr<SequenceBacking>> all;
  for (int k = 0; k < 100; ++k) all.push_back(backing(c, k));
  RequestIndex index;
  std::map<int, bool> model;
  std::mt19937 random(7);
  int mismatches = 0;
  for (int step = 0; step < 4000; ++step) {
    const int k = static_cast<int>(random() % all.size());
    const std::uint64_t h = hash_of(k);
    if (model[k]) {
      if (random() % 4 == 0) {
        // A second entry under a live id is refused (another backing with the same id).
        auto twin = backing(c, k);
        if (index.insert(twin.get(), h)) ++mismatches;
      } else {
        if (!index.erase(all[k].get(), h)) ++mismatches;
        model[k] = false;
      }
    } else {
      if (index.erase(all[k].get(), h)) ++mismatches;  // not in: nothing to erase
      if (!index.insert(all[k].get(), h)) ++mismatches;
      model[k] = true;
    }
    std::size_t in = 0;
    for (int i = 0; i < static_cast<int>(all.size()); ++i) {
      const SequenceBacking* found = index.find(all[i]->request_id(), hash_of(i));
      if (found != (model[i] ? all[i].get() : nullptr)) ++mismatches;
      in += model[i];
    }
    if (index.size() != in) ++mismatches;
    std::size_t seen = 0;
    index.for_each([&](const SequenceBacking&) { ++seen; });
    if (seen != in) ++mismatches;
  }
  if (mismatches != 0) std::fprintf(stderr, "%s: %d mismatches\n", name, mismatches);
  CHECK(mismatches == 0);
}

// After a burst, the table shrinks with its entries (a walk over it costs what is live, not
// the peak) and every entry left is still found.
void shrinks_after_a_burst() {
  auto c = make();
  std::vector<std::shared_ptr<SequenceBacking>> all;
  RequestIndex index;
  for (int k = 0; k < 1000; ++k) {
    all.push_back(backing(c, k));
    CHECK(index.insert(all.back().get(), RequestIndex::hash(all.back()->request_id())));
  }
  const std::size_t peak = index.slot_count();
  CHECK(peak >= 1334);  // at most three quarters full
  for (int k = 10; k < 1000; ++k) CHECK(index.erase(all[k].get(), RequestIndex::hash(all[k]->request_id())));
  CHECK(index.size() == 10);
  CHECK(index.slot_count() <= 80);  // at least an eighth full
  for (int k = 0; k < 1000; ++k) {
    const SequenceBacking* found = index.find(all[k]->request_id(), RequestIndex::hash(all[k]->request_id()));
    CHECK(found == (k < 10 ? all[k].get() : nullptr));
  }
  // And grows again from there.
  for (int k = 10; k < 1000; ++k) CHECK(index.insert(all[k].get(), RequestIndex::hash(all[k]->request_id())));
  CHECK(index.slot_count() == peak);
  for (int k = 0; k < 1000; ++k) CHECK(index.erase(all[k].get(), RequestIndex::hash(all[k]->request_id())));
  CHECK(index.size() == 0 && index.slot_count() == 16);
}

}  // namespace

int main() {
  shrinks_after_a_burst();
  agrees_with_a_map_under_colliding_hashes([](int k) { return RequestIndex::hash("r" + std::to_string(k)); }, "real hashes");
  agrees_with_a_map_under_colliding_hashes([](int k) { return std::uint64_t(k % 5); }, "five hashes");
  // Homes at the end of every table size: runs wrap around to the first slots.
  agrees_with_a_map_under_colliding_hashes([](int k) { return ~std::uint64_t{0} - std::uint64_t(k % 3); }, "wrapping");
  agrees_with_a_map_under_colliding_hashes([](int k) { return std::uint64_t(k % 2) << 40; }, "equal low bits");
  return lifecore::test_support::finish("sequence_request_index_test");
}
