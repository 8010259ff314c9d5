// A request id's holders share one immutable text: copies read the same bytes at the same
// address, the text lives while any holder does (also when the last one goes on another
// thread), and the empty id allocates nothing.
#include <string>
#include <thread>
#include <vector>

#include "lifecore/sequence/request_id.hpp"
#include "test_support.hpp"

using lifecore::sequence::RequestId;

namespace {

void copies_share_one_text() {
  const std::string text = "cmpl-00000042-0000-4000-8000-000000000000";
  RequestId first(text);
  RequestId copy = first;
  CHECK(copy.view() == text && copy.view().data() == first.view().data());
  CHECK(first.view().data() != text.data());  // a copy of the caller's text, not a view of it
  RequestId moved = std::move(first);
  CHECK(first.view().empty() && moved.view().data() == copy.view().data());
  copy = RequestId("other");
  CHECK(copy.view() == "other" && moved.view() == text);
}

void the_empty_id_is_empty() {
  RequestId none;
  RequestId empty{std::string_view()};
  CHECK(none.view().empty() && empty.view().empty() && none.view().data() == nullptr);
}

void the_last_holder_on_any_thread_frees_it() {
  // Holders dropped on several threads at once: the count never frees the text early
  // (every thread reads it just before letting go), and exactly once (the sanitizers watch).
  for (int round = 0; round < 200; ++round) {
    RequestId shared(std::string(40, static_cast<char>('a' + round % 26)));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([copy = shared, round]() mutable {
        CHECK(copy.view() == std::string(40, static_cast<char>('a' + round % 26)));
        copy = RequestId();
      });
    shared = RequestId();
    for (auto& thread : threads) thread.join();
  }
}

}  // namespace

int main() {
  copies_share_one_text();
  the_empty_id_is_empty();
  the_last_holder_on_any_thread_frees_it();
  return lifecore::test_support::finish("sequence_request_id_test");
}
