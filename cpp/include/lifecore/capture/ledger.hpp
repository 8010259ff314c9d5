// The monotone per-run ledger: reservations are overflow-checked, checked against the
// per-step limit first and then the cumulative one, and never refunded once granted.
#pragma once

#include <optional>

#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

struct LimitHit {
  Budget budget;
  bool cumulative;
};

class CaptureLedger {
 public:
  CaptureLedger() = default;
  // A child ledger starting from inherited usage; throws BudgetExceeded if that already
  // exceeds the cumulative limits.
  CaptureLedger(const CaptureLimits& limits, const CaptureUsage& inherited);

  // Grants the whole reservation or nothing. Returns the limit that refused it.
  std::optional<LimitHit> try_reserve(const CaptureUsage& usage);
  // As try_reserve, but a refusal is a BudgetExceeded error (nothing charged).
  void reserve(const CaptureUsage& usage);
  void begin_step() noexcept { step_ = {}; }

  const CaptureUsage& step() const noexcept { return step_; }
  const CaptureUsage& cumulative() const noexcept { return cumulative_; }
  const CaptureLimits& limits() const noexcept { return limits_; }

 private:
  CaptureLimits limits_;
  CaptureUsage step_;
  CaptureUsage cumulative_;
};

// The first budget of `usage` over `limit`, in the order captures, retention, host, encoded.
std::optional<Budget> exceeded(const CaptureUsage& usage, const CaptureUsage& limit) noexcept;
// The first budget whose sum a + b does not fit in 64 bits (it exceeds any limit).
std::optional<Budget> overflowing_budget(const CaptureUsage& a, const CaptureUsage& b) noexcept;
// Overflow-checked sum; nullopt on overflow.
std::optional<CaptureUsage> checked_add(const CaptureUsage& a, const CaptureUsage& b) noexcept;
std::optional<CaptureUsage> checked_mul(const CaptureUsage& a, std::uint64_t factor) noexcept;
// a + b, or OverflowError naming `what`.
CaptureUsage add_or_throw(const CaptureUsage& a, const CaptureUsage& b, const char* what);

[[noreturn]] void raise_limit(LimitHit hit);

}  // namespace lifecore::capture
