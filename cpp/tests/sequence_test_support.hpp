// What the sequence tests share: a coordinator with one "kv" domain of `pages` 4 KiB pages
// of 16 tokens each, on host accounting.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <variant>

#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "test_support.hpp"

namespace lifecore::test_support {

inline std::shared_ptr<sequence::AdmissionCoordinator> kv_coordinator(std::uint64_t pages, std::uint32_t slots = 8) {
  sequence::CoordinatorConfig config;
  config.domains.push_back({"kv", pages * 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = slots;
  return sequence::AdmissionCoordinator::create(std::move(config));
}

// A session of `request` (16 prompt tokens, a fit of 64) opened and stepped to 16 tokens.
inline std::unique_ptr<sequence::SequenceSession> open_stepped_session(
    const std::shared_ptr<sequence::AdmissionCoordinator>& c, const char* request) {
  auto decision = c->admit({request, 16, 64, {}});
  auto* admitted = std::get_if<sequence::Admitted>(&decision);
  CHECK(admitted != nullptr);
  auto session = admitted->resources->open_session();
  admitted->resources.reset();
  CHECK(session->step(16) == sequence::BackingOutcome::current);
  return session;
}

}  // namespace lifecore::test_support
