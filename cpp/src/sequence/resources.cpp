#include "lifecore/sequence/resources.hpp"

#include <mutex>
#include <string>

#include "lifecore/error.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::sequence {

AdmittedSequenceResources::AdmittedSequenceResources(std::uint64_t prompt_tokens, std::uint64_t fit_tokens,
                                                     std::shared_ptr<SequenceBacking> backing,
                                                     std::shared_ptr<const BackingSnapshot> initial)
    : prompt_tokens_(prompt_tokens), fit_tokens_(fit_tokens), backing_(std::move(backing)),
      initial_(std::move(initial)) {}

std::unique_ptr<SequenceSession> AdmittedSequenceResources::open_session() {
  return std::unique_ptr<SequenceSession>(new SequenceSession(open_session_here()));
}

SequenceSession AdmittedSequenceResources::open_session_here() {
  // One incarnation per logical sequence: the first opener wins, every other is refused. The
  // resources are never spent before they are opened, so a refusal names the opening.
  if (opened_.exchange(true))
    raise(ErrorKind::SessionState,
          "open_session: the sequence is already bound to a session (a logical sequence has one incarnation)");
  return SequenceSession(shared_from_this());
}

bool AdmittedSequenceResources::spent() const noexcept {
  std::lock_guard<SessionLock> lock(mutex_);
  return !backing_;
}

std::shared_ptr<SequenceBacking> AdmittedSequenceResources::held(const char* what) const {
  std::shared_ptr<SequenceBacking> backing;
  {
    std::lock_guard<SessionLock> lock(mutex_);
    backing = backing_;
  }
  if (!backing)
    raise(ErrorKind::Closed, std::string(what) +
                                 ": the admitted resources are spent (the session they opened has closed; they hold "
                                 "nothing since)");
  return backing;
}

RequestId AdmittedSequenceResources::request_id(const char* what) const { return held(what)->shared_request_id(); }
std::uint64_t AdmittedSequenceResources::fit_pages(const char* what) const { return held(what)->fit_pages(); }
Authority AdmittedSequenceResources::sequence_authority(const char* what) const {
  return held(what)->sequence_authority();
}
Authority AdmittedSequenceResources::request_authority(const char* what) const {
  return held(what)->request_authority();
}

std::shared_ptr<SequenceBacking> AdmittedSequenceResources::backing() const {
  std::lock_guard<SessionLock> lock(mutex_);
  return backing_;
}

std::shared_ptr<SequenceBacking> AdmittedSequenceResources::spend() noexcept {
  std::lock_guard<SessionLock> lock(mutex_);
  return std::move(backing_);
}

}  // namespace lifecore::sequence
