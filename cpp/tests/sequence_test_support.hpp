// What the sequence tests share: a coordinator with one "kv" domain of `pages` 4 KiB pages
// of 16 tokens each, on host accounting.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "lifecore/sequence/coordinator.hpp"

namespace lifecore::test_support {

inline std::shared_ptr<sequence::AdmissionCoordinator> kv_coordinator(std::uint64_t pages, std::uint32_t slots = 8) {
  sequence::CoordinatorConfig config;
  config.domains.push_back({"kv", pages * 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = slots;
  return sequence::AdmissionCoordinator::create(std::move(config));
}

}  // namespace lifecore::test_support
