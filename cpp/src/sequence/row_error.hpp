// A batch call's error at one row (step_all, DecodeTable.step): the row, and how many rows
// before it stepped, as attributes of the error (`row`, `rows_stepped` on the Python
// exception), so a scheduler knows what changed without reading the message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "lifecore/error.hpp"

namespace lifecore::sequence {

[[noreturn]] inline void rethrow_at_row(const Error& error, std::size_t row, std::size_t stepped) {
  std::vector<ErrorAttribute> attributes = error.attributes();
  attributes.emplace_back("row", static_cast<std::int64_t>(row));
  attributes.emplace_back("rows_stepped", static_cast<std::int64_t>(stepped));
  throw Error(error.kind(), error.message(), std::move(attributes));
}

}  // namespace lifecore::sequence
