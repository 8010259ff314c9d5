// A loader's table of entry points as it resolved them: each pointer stored in its typed
// member, whether each entry resolved (diagnostics and the loader tests), and the first
// required entry that did not (the reason the backend cannot start). The backend's own
// lookup (a get-proc-address call, or the library's exports) finds the pointers.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lifecore::driver {

class SymbolTable {
 public:
  // Stores `pointer` into `entry` as its function-pointer type. `description` names a
  // missing required entry in the reason (the backend's words: the name, its version).
  template <class Entry>
  void bind(Entry& entry, void* pointer, const char* member, bool required, std::string_view description) {
    entry = reinterpret_cast<Entry>(pointer);
    resolved_.emplace_back(member, pointer != nullptr);
    if (required && pointer == nullptr && missing_.empty()) missing_ = description;
  }

  // The first required entry that did not resolve, as its description names it; empty when none.
  const std::string& missing() const { return missing_; }
  // Every entry and whether it resolved, in table order.
  std::vector<std::pair<std::string, bool>> take_resolved() { return std::exchange(resolved_, {}); }

 private:
  std::vector<std::pair<std::string, bool>> resolved_;
  std::string missing_;
};

}  // namespace lifecore::driver
