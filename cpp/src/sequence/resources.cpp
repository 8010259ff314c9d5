#include "lifecore/sequence/resources.hpp"

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
  // One incarnation per logical sequence: the first opener wins, every other is refused.
  if (opened_.exchange(true))
    raise(ErrorKind::SessionState,
          "open_session: the sequence is already bound to a session (a logical sequence has one incarnation)");
  return SequenceSession(shared_from_this());
}

}  // namespace lifecore::sequence
