#include "lifecore/sequence/benchmark.hpp"

#include <limits>
#include <string>
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

// One live sequence per request id: the sequences kept live are named apart.
std::shared_ptr<AdmittedSequenceResources> admit_or_throw(AdmissionCoordinator& c, std::string request_id,
                                                          std::int64_t prompt, std::int64_t fit) {
  auto decision = c.admit({std::move(request_id), prompt, fit, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  if (!admitted) raise(ErrorKind::Capacity, "benchmark: admission was not granted");
  return admitted->resources;
}

// The decode sequence's fit: far beyond any benchmark's steps, so it never runs out, and
// within the int32 block ids a domain hands out.
constexpr std::int64_t kDecodeFit = std::int64_t{1} << 30;

}  // namespace

SequenceBenchLoop::SequenceBenchLoop(std::uint64_t live, std::uint64_t target_tokens, std::uint32_t tokens_per_page)
    : target_tokens_(target_tokens), tokens_per_page_(tokens_per_page) {
  if (tokens_per_page == 0 || target_tokens < tokens_per_page) {
    raise(ErrorKind::InvalidArgument, "SequenceBenchLoop: target_tokens must be at least tokens_per_page (> 0)");
  }
  // The slots (live + 16) are a uint32 and a fit an int64: past them a value would wrap.
  if (live > std::numeric_limits<std::uint32_t>::max() - 16)
    raise(ErrorKind::Overflow, "SequenceBenchLoop: live must be at most 2**32 - 17, got " + std::to_string(live));
  if (target_tokens > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    raise(ErrorKind::Overflow, "SequenceBenchLoop: target_tokens must be below 2**63, got " + std::to_string(target_tokens));
  coordinator_ = bench_coordinator(tokens_per_page, static_cast<std::uint32_t>(live + 16));
  others_.reserve(live);
  for (std::uint64_t i = 0; i < live; ++i) {
    others_.push_back(admit_or_throw(*coordinator_, "live-" + std::to_string(i), tokens_per_page,
                                     static_cast<std::int64_t>(target_tokens))->open_session());
  }
  decode_coordinator_ = bench_coordinator(tokens_per_page, 4);
  decoding_ = admit_or_throw(*decode_coordinator_, "decode", 1, kDecodeFit)->open_session();
}

SequenceBenchLoop::~SequenceBenchLoop() = default;

void SequenceBenchLoop::lifecycles(std::uint64_t count, bool primitives) {
  for (std::uint64_t i = 0; i < count; ++i) {
    auto session = admit_or_throw(*coordinator_, "bench", tokens_per_page_, static_cast<std::int64_t>(target_tokens_))->open_session();
    for (std::uint64_t t = tokens_per_page_; t <= target_tokens_; t += tokens_per_page_) {
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
}

void SequenceBenchLoop::decode_steps(std::uint64_t count, bool primitives) {
  // decoded_ stays below the fit, so the difference cannot wrap (a sum with count could).
  if (count >= static_cast<std::uint64_t>(kDecodeFit) - decoded_) {
    raise(ErrorKind::InvalidArgument, "SequenceBenchLoop::decode_steps: the decode sequence's fit is used up");
  }
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t t = ++decoded_;
    if (primitives) {
      const std::uint64_t page_end = (t + tokens_per_page_ - 1) / tokens_per_page_ * tokens_per_page_;
      decoding_->try_ensure_backing_covers(static_cast<std::int64_t>(page_end));
      auto frame = decoding_->acquire_frame();
      frame->commit();
    } else {
      decoding_->step(static_cast<std::int64_t>(t));
    }
  }
}

BookkeepingSizes bookkeeping_sizes() {
  return {sizeof(SessionState), sizeof(SequenceSession), sizeof(AdmittedSequenceResources), sizeof(SequenceBacking),
          sizeof(BackingSnapshot), sizeof(BackingExtent)};
}

}  // namespace lifecore::sequence
