#include "lifecore/capture/ledger.hpp"

#include <string>

#include "lifecore/error.hpp"

namespace lifecore::capture {

std::optional<Budget> exceeded(const CaptureUsage& u, const CaptureUsage& limit) noexcept {
  if (u.captures > limit.captures) return Budget::Captures;
  if (u.retained_bytes > limit.retained_bytes) return Budget::Retention;
  if (u.host_bytes > limit.host_bytes) return Budget::Host;
  if (u.encoded_bytes > limit.encoded_bytes) return Budget::Encoded;
  return std::nullopt;
}

std::optional<CaptureUsage> checked_add(const CaptureUsage& a, const CaptureUsage& b) noexcept {
  CaptureUsage r;
  if (__builtin_add_overflow(a.captures, b.captures, &r.captures) ||
      __builtin_add_overflow(a.retained_bytes, b.retained_bytes, &r.retained_bytes) ||
      __builtin_add_overflow(a.host_bytes, b.host_bytes, &r.host_bytes) ||
      __builtin_add_overflow(a.encoded_bytes, b.encoded_bytes, &r.encoded_bytes))
    return std::nullopt;
  return r;
}

std::optional<CaptureUsage> checked_mul(const CaptureUsage& a, std::uint64_t f) noexcept {
  CaptureUsage r;
  if (__builtin_mul_overflow(a.captures, f, &r.captures) ||
      __builtin_mul_overflow(a.retained_bytes, f, &r.retained_bytes) ||
      __builtin_mul_overflow(a.host_bytes, f, &r.host_bytes) ||
      __builtin_mul_overflow(a.encoded_bytes, f, &r.encoded_bytes))
    return std::nullopt;
  return r;
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
  auto step = checked_add(step_, usage);
  if (!step) raise(ErrorKind::InvalidArgument, "capture usage overflow");
  if (auto b = exceeded(*step, limits_.per_step)) return LimitHit{*b, false};
  auto total = checked_add(cumulative_, usage);
  if (!total) raise(ErrorKind::InvalidArgument, "capture usage overflow");
  if (auto b = exceeded(*total, limits_.cumulative)) return LimitHit{*b, true};
  step_ = *step;
  cumulative_ = *total;
  return std::nullopt;
}

void CaptureLedger::reserve(const CaptureUsage& usage) {
  if (auto hit = try_reserve(usage)) raise_limit(*hit);
}

}  // namespace lifecore::capture
