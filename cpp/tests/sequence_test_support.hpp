// What the sequence tests share: a coordinator with one "kv" domain (or `domain_count`: "kv",
// "kv1", ...) of `pages` 4 KiB pages of 16 tokens each, on host accounting (`memory`, or its own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "test_support.hpp"

namespace lifecore::test_support {

inline std::shared_ptr<sequence::AdmissionCoordinator> kv_coordinator(
    std::uint64_t pages, std::uint32_t slots = 8, std::size_t domain_count = 1,
    std::shared_ptr<sequence::PageMemory> memory = nullptr) {
  sequence::CoordinatorConfig config;
  for (std::size_t d = 0; d < domain_count; ++d)
    config.domains.push_back({d == 0 ? std::string("kv") : "kv" + std::to_string(d), pages * 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = slots;
  config.memory = std::move(memory);
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
