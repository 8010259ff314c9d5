// What an admission grants: the sequence and request authorities, the fit limit and the
// initial backing snapshot covering the prompt. The resources are the first holder of the
// backing (the session holds them until it closes). open_session() is one-shot: a logical
// sequence has exactly one incarnation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/capacity.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;
class SequenceSession;

class AdmittedSequenceResources : public std::enable_shared_from_this<AdmittedSequenceResources> {
 public:
  // The request id and the fit in pages are the backing's (kept once, for every holder).
  AdmittedSequenceResources(std::uint64_t prompt_tokens, std::uint64_t fit_tokens,
                            std::shared_ptr<SequenceBacking> backing, std::shared_ptr<const BackingSnapshot> initial);

  // SessionStateError when already opened (by anyone, on any thread).
  std::unique_ptr<SequenceSession> open_session();
  // The same, made where the caller puts it (a binding's object holds it inline: no
  // allocation of its own).
  SequenceSession open_session_here();
  bool opened() const noexcept { return opened_.load(); }

  std::string_view request_id() const noexcept { return backing_->request_id(); }
  std::uint64_t prompt_tokens() const noexcept { return prompt_tokens_; }
  std::uint64_t fit_tokens() const noexcept { return fit_tokens_; }
  std::uint64_t fit_pages() const noexcept { return backing_->fit_pages(); }
  const std::shared_ptr<const BackingSnapshot>& initial_backing() const noexcept { return initial_; }
  const std::shared_ptr<AdmissionCoordinator>& coordinator() const noexcept {
    return backing_->coordinator();
  }
  const std::shared_ptr<SequenceBacking>& backing() const noexcept { return backing_; }
  const Authority& sequence_authority() const noexcept { return backing_->sequence_authority(); }
  const Authority& request_authority() const noexcept { return backing_->request_authority(); }

 private:
  std::uint64_t prompt_tokens_;
  std::uint64_t fit_tokens_;
  std::shared_ptr<SequenceBacking> backing_;
  std::shared_ptr<const BackingSnapshot> initial_;
  std::atomic<bool> opened_{false};
};

}  // namespace lifecore::sequence
