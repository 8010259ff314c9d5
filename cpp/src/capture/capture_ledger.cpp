#include "lifecore/capture/ledger.hpp"

#include <string>

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"

namespace lifecore::capture {

std::optional<Budget> exceeded(const CaptureUsage& u, const CaptureUsage& limit) noexcept {
  if (u.captures > limit.captures) return Budget::captures;
  if (u.retained_bytes > limit.retained_bytes) return Budget::retention;
  if (u.host_bytes > limit.host_bytes) return Budget::host;
  if (u.encoded_bytes > limit.encoded_bytes) return Budget::encoded;
  return std::nullopt;
}

std::optional<Budget> overflowing_budget(const CaptureUsage& a, const CaptureUsage& b) noexcept {
  if (!checked::add(a.captures, b.captures)) return Budget::captures;
  if (!checked::add(a.retained_bytes, b.retained_bytes)) return Budget::retention;
  if (!checked::add(a.host_bytes, b.host_bytes)) return Budget::host;
  if (!checked::add(a.encoded_bytes, b.encoded_bytes)) return Budget::encoded;
  return std::nullopt;
}

std::optional<CaptureUsage> checked_add(const CaptureUsage& a, const CaptureUsage& b) noexcept {
  auto captures = checked::add(a.captures, b.captures);
  auto retained = checked::add(a.retained_bytes, b.retained_bytes);
  auto host = checked::add(a.host_bytes, b.host_bytes);
  auto encoded = checked::add(a.encoded_bytes, b.encoded_bytes);
  if (!captures || !retained || !host || !encoded) return std::nullopt;
  return CaptureUsage{*captures, *retained, *host, *encoded};
}

std::optional<CaptureUsage> checked_mul(const CaptureUsage& a, std::uint64_t f) noexcept {
  auto captures = checked::mul(a.captures, f);
  auto retained = checked::mul(a.retained_bytes, f);
  auto host = checked::mul(a.host_bytes, f);
  auto encoded = checked::mul(a.encoded_bytes, f);
  if (!captures || !retained || !host || !encoded) return std::nullopt;
  return CaptureUsage{*captures, *retained, *host, *encoded};
}

CaptureUsage add_or_throw(const CaptureUsage& a, const CaptureUsage& b, const char* what) {
  if (auto sum = checked_add(a, b)) return *sum;
  checked::overflow(what);
}

void raise_limit(LimitHit hit) {
  raise(ErrorKind::BudgetExceeded,
        std::string("capture ") + (hit.cumulative ? "cumulative" : "per-step") + " limit exceeded: " +
            to_string(hit.budget),
        {{"budget", std::string(to_string(hit.budget))}, {"cumulative", hit.cumulative}});
}

CaptureLedger::CaptureLedger(const CaptureLimits& limits, const CaptureUsage& inherited)
    : limits_(limits), cumulative_(inherited) {
  if (auto b = exceeded(inherited, limits.cumulative)) raise_limit({*b, true});
}

std::optional<LimitHit> CaptureLedger::try_reserve(const CaptureUsage& usage) {
  // A sum past 64 bits exceeds every limit: it is refused like any other, never wrapped.
  if (auto b = overflowing_budget(step_, usage)) return LimitHit{*b, false};
  auto step = checked_add(step_, usage);
  if (auto b = exceeded(*step, limits_.per_step)) return LimitHit{*b, false};
  if (auto b = overflowing_budget(cumulative_, usage)) return LimitHit{*b, true};
  auto total = checked_add(cumulative_, usage);
  if (auto b = exceeded(*total, limits_.cumulative)) return LimitHit{*b, true};
  step_ = *step;
  cumulative_ = *total;
  return std::nullopt;
}

void CaptureLedger::reserve(const CaptureUsage& usage) {
  if (auto hit = try_reserve(usage)) raise_limit(*hit);
}

}  // namespace lifecore::capture
