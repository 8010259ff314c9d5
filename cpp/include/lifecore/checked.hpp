// Checked arithmetic for every size, count, usage, geometry and deadline the core computes.
// An overflow is never a wrapped number: the optional forms return nullopt (for callers that
// turn it into a decision, e.g. a skip), the throwing forms raise OverflowError naming what
// was being computed. Unsigned and signed 64-bit values only: narrower types widen first.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "lifecore/error.hpp"

namespace lifecore::checked {

template <class T>
concept Integer = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <Integer T>
constexpr std::optional<T> add(T a, T b) noexcept {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <Integer T>
constexpr std::optional<T> sub(T a, T b) noexcept {
  T out{};
  if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <Integer T>
constexpr std::optional<T> mul(T a, T b) noexcept {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, chained through an optional: nullopt stays nullopt.
template <Integer T>
constexpr std::optional<T> add(std::optional<T> a, T b) noexcept {
  return a ? add(*a, b) : std::nullopt;
}
template <Integer T>
constexpr std::optional<T> mul(std::optional<T> a, T b) noexcept {
  return a ? mul(*a, b) : std::nullopt;
}

// Value-converting: nullopt when `value` does not fit in To.
template <Integer To, Integer From>
constexpr std::optional<To> narrow(From value) noexcept {
  if (!std::in_range<To>(value)) return std::nullopt;
  return static_cast<To>(value);
}

// A double as float32: nullopt for a finite value past float's range (from 2**128 - 2**103 on
// a double rounds to infinity, and converting it is undefined); an infinity or a NaN converts
// as itself.
inline std::optional<float> narrow_float(double value) noexcept {
  if (std::isfinite(value) && std::fabs(value) >= 0x1.ffffffp+127) return std::nullopt;
  return static_cast<float>(value);
}

// OverflowError for a value narrow_float refused: "<what> = <value> is outside the float32 range".
[[noreturn]] inline void float32_overflow(const std::string& what, double value) {
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.17g", value);
  raise(ErrorKind::Overflow, what + " = " + shown + " is outside the float32 range");
}

[[noreturn]] inline void overflow(const std::string& what) {
  raise(ErrorKind::Overflow, what + ": the result does not fit in 64 bits (arithmetic overflow); nothing was changed");
}

// Throwing forms: `what` names the quantity ("reserve: token_rows * top_k * 16").
template <Integer T>
T add_or_throw(T a, T b, const std::string& what) {
  if (auto out = add(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T sub_or_throw(T a, T b, const std::string& what) {
  if (auto out = sub(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T mul_or_throw(T a, T b, const std::string& what) {
  if (auto out = mul(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T value_or_throw(std::optional<T> value, const std::string& what) {
  if (value) return *value;
  overflow(what);
}

// The same for a literal `what`: its string is built only on overflow (these run on hot
// paths such as a decode step, where building it each time costs more than the arithmetic).
template <Integer T>
T add_or_throw(T a, T b, const char* what) {
  if (auto out = add(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T sub_or_throw(T a, T b, const char* what) {
  if (auto out = sub(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T mul_or_throw(T a, T b, const char* what) {
  if (auto out = mul(a, b)) return *out;
  overflow(what);
}
template <Integer T>
T value_or_throw(std::optional<T> value, const char* what) {
  if (value) return *value;
  overflow(what);
}

}  // namespace lifecore::checked
