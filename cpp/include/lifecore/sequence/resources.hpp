// What an admission grants: the sequence and request authorities, the fit limit and the
// initial backing snapshot covering the prompt. The resources are the first holder of the
// backing. open_session() is one-shot: a logical sequence has exactly one incarnation, and
// the session it opens holds the resources until it closes. Its close spends them: they let
// go of the backing then, however many handles of them remain, so a decision or a handle kept
// in a variable after its sequence ended keeps no pages, no slot and no coordinator.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/request_id.hpp"
#include "lifecore/sequence/session_lock.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;
class SequenceSession;

class AdmittedSequenceResources : public std::enable_shared_from_this<AdmittedSequenceResources> {
 public:
  // The request id and the fit in pages are the backing's (kept once, for every holder).
  AdmittedSequenceResources(std::uint64_t prompt_tokens, std::uint64_t fit_tokens,
                            std::shared_ptr<SequenceBacking> backing, std::shared_ptr<const BackingSnapshot> initial);

  // SessionStateError when already opened (by anyone, on any thread); ClosedError once spent.
  std::unique_ptr<SequenceSession> open_session();
  // The same, made where the caller puts it (a binding's object holds it inline: no
  // allocation of its own).
  SequenceSession open_session_here();
  bool opened() const noexcept { return opened_.load(); }
  // True once the session they opened has closed: they hold nothing since.
  bool spent() const noexcept;

  std::uint64_t prompt_tokens() const noexcept { return prompt_tokens_; }
  std::uint64_t fit_tokens() const noexcept { return fit_tokens_; }
  const std::shared_ptr<const BackingSnapshot>& initial_backing() const noexcept { return initial_; }
  // What the backing knows, read while these resources hold it: ClosedError naming `what`
  // (or the accessor) once spent.
  RequestId request_id(const char* what = "request_id") const;
  std::uint64_t fit_pages(const char* what = "fit_pages") const;
  Authority sequence_authority(const char* what = "sequence_authority") const;
  Authority request_authority(const char* what = "request_authority") const;
  // The backing while these resources hold it; null once spent.
  std::shared_ptr<SequenceBacking> backing() const;

  // For the session these resources opened, under its lock with its handle open: the backing,
  // read without this object's lock (spend() runs under that same session lock).
  const std::shared_ptr<SequenceBacking>& session_backing() const noexcept { return backing_; }
  // Called once, by the session they opened, as it closes (under its lock): hands the backing
  // to the caller, who drops it where it chooses (the pages return if it is the last holder).
  std::shared_ptr<SequenceBacking> spend() noexcept;

 private:
  // The backing under this object's lock; ClosedError naming `what` once spent.
  std::shared_ptr<SequenceBacking> held(const char* what) const;

  std::uint64_t prompt_tokens_;
  std::uint64_t fit_tokens_;
  std::shared_ptr<SequenceBacking> backing_;  // null once spent; written under both locks
  std::shared_ptr<const BackingSnapshot> initial_;
  std::atomic<bool> opened_{false};
  mutable SessionLock mutex_;  // one byte beside opened_: the record does not grow
};

}  // namespace lifecore::sequence
