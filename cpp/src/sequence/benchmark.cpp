#include "lifecore/sequence/benchmark.hpp"

#include <chrono>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence/session_state.hpp"

namespace lifecore::sequence {
namespace {

std::shared_ptr<AdmissionCoordinator> bench_coordinator(std::uint32_t tokens_per_page, std::uint32_t max_active) {
  CoordinatorConfig config;
  config.domains.push_back({"kv", std::uint64_t{1} << 50, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = tokens_per_page;
  config.max_active_sequences = max_active;
  return AdmissionCoordinator::create(std::move(config));
}

std::shared_ptr<AdmittedSequenceResources> admit_or_throw(AdmissionCoordinator& c, std::int64_t prompt, std::int64_t fit) {
  auto decision = c.admit({"bench", prompt, fit, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  if (!admitted) raise(ErrorKind::Capacity, "benchmark: admission was not granted");
  return admitted->resources;
}

}  // namespace

SequenceBenchResult bench_lifecycles(std::uint64_t lifecycles, std::uint64_t live, std::uint64_t target_tokens,
                                     std::uint32_t tokens_per_page, bool primitives) {
  auto coordinator = bench_coordinator(tokens_per_page, static_cast<std::uint32_t>(live + 16));
  std::vector<std::unique_ptr<SequenceSession>> others;
  others.reserve(live);
  for (std::uint64_t i = 0; i < live; ++i) others.push_back(admit_or_throw(*coordinator, tokens_per_page, target_tokens)->open_session());
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < lifecycles; ++i) {
    auto session = admit_or_throw(*coordinator, tokens_per_page, static_cast<std::int64_t>(target_tokens))->open_session();
    for (std::uint64_t t = tokens_per_page; t <= target_tokens; t += tokens_per_page) {
      if (primitives) {
        session->try_ensure_backing_covers(static_cast<std::int64_t>(t));
        auto frame = session->acquire_frame();
        frame->commit();
      } else {
        session->step(static_cast<std::int64_t>(t));
      }
    }
    session->try_complete();
    session->close();  // the last holder: releases pages, the slot and the authorities
  }
  const auto stop = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(stop - start).count(), lifecycles};
}

SequenceBenchResult bench_decode_steps(std::uint64_t steps, std::uint32_t tokens_per_page, bool primitives) {
  auto coordinator = bench_coordinator(tokens_per_page, 4);
  auto session = admit_or_throw(*coordinator, 1, static_cast<std::int64_t>(steps + 1))->open_session();
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t t = 1; t <= steps; ++t) {
    if (primitives) {
      const std::uint64_t page_end = (t + tokens_per_page - 1) / tokens_per_page * tokens_per_page;
      session->try_ensure_backing_covers(static_cast<std::int64_t>(std::min(page_end, steps + 1)));
      auto frame = session->acquire_frame();
      frame->commit();
    } else {
      session->step(static_cast<std::int64_t>(t));
    }
  }
  const auto stop = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(stop - start).count(), steps};
}

BookkeepingSizes bookkeeping_sizes() {
  return {sizeof(SessionState), sizeof(SequenceSession), sizeof(AdmittedSequenceResources), sizeof(SequenceBacking),
          sizeof(BackingSnapshot), sizeof(BackingExtent)};
}

}  // namespace lifecore::sequence
