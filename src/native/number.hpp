// Number scanning for CTF values: CNTK's accepted grammar, correctly rounded values.
//
// Grammar (exactly CNTK's): [+-]? DIGITS ( "." DIGITS* )? ( [eE] [+-]? DIGITS )?
// A "." not followed by a digit ends the number (so "45." is 45 and "1.e5" stops at "e").
// Values are rounded to double exactly as Python's float() does; Clinger's fast path covers the
// common case and std::from_chars (correctly rounded) the rest.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace cntkio {

enum class NumberStatus : uint8_t { ok, syntax, out_of_range };

inline bool is_digit(unsigned char c) { return static_cast<unsigned>(c - '0') < 10u; }

namespace detail {

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Slow path: hand the validated token to from_chars, which rejects '+' and a bare trailing '.'.
inline NumberStatus parse_slow(const char* begin, const char* end, bool negative, int64_t magnitude,
                               double& out) {
  std::string text;
  text.reserve(static_cast<size_t>(end - begin));
  for (const char* p = begin; p < end; ++p) {
    if (*p == '+' && p == begin) continue;
    if (*p == '.' && (p + 1 == end || !is_digit(static_cast<unsigned char>(p[1])))) continue;
    text.push_back(*p);
  }
  double value = 0.0;
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec == std::errc::result_out_of_range) {
    if (magnitude > 0) return NumberStatus::out_of_range;
    out = negative ? -0.0 : 0.0;  // total underflow rounds to zero, as float() does
    return NumberStatus::ok;
  }
  if (result.ec != std::errc()) return NumberStatus::syntax;
  out = value;
  return NumberStatus::ok;
}

}  // namespace detail

// Scans one number starting at p (p < end). On success stores the value, sets *next to the first
// byte after the number and returns ok. On a syntax error *next points at the offending byte.
inline NumberStatus scan_number(const char* p, const char* end, double& out, const char** next) {
  const char* begin = p;
  bool negative = false;
  if (*p == '-' || *p == '+') {
    negative = *p == '-';
    ++p;
  }
  if (p >= end || !is_digit(static_cast<unsigned char>(*p))) {
    *next = p;
    return NumberStatus::syntax;
  }
  uint64_t mantissa = 0;
  int significant = 0;
  bool truncated = false;
  int64_t exponent = 0;
  for (; p < end && is_digit(static_cast<unsigned char>(*p)); ++p) {
    unsigned digit = static_cast<unsigned>(*p - '0');
    if (significant < 19) {
      mantissa = mantissa * 10 + digit;
      significant += mantissa != 0;
    } else {
      ++exponent;
      truncated |= digit != 0;
    }
  }
  bool exponent_allowed = true;
  if (p < end && *p == '.') {
    ++p;
    if (p < end && is_digit(static_cast<unsigned char>(*p))) {
      for (; p < end && is_digit(static_cast<unsigned char>(*p)); ++p) {
        unsigned digit = static_cast<unsigned>(*p - '0');
        if (significant < 19) {
          mantissa = mantissa * 10 + digit;
          significant += mantissa != 0;
          --exponent;
        } else {
          truncated |= digit != 0;
        }
      }
    } else {
      exponent_allowed = false;  // "45." ends here; "1.e5" is not a number followed by "e5"
    }
  }
  if (exponent_allowed && p < end && (*p == 'e' || *p == 'E')) {
    const char* q = p + 1;
    bool exp_negative = false;
    if (q < end && (*q == '-' || *q == '+')) {
      exp_negative = *q == '-';
      ++q;
    }
    if (q >= end || !is_digit(static_cast<unsigned char>(*q))) {
      *next = q;
      return NumberStatus::syntax;
    }
    int64_t exp_value = 0;
    for (; q < end && is_digit(static_cast<unsigned char>(*q)); ++q) {
      if (exp_value < 100000000) exp_value = exp_value * 10 + (*q - '0');
    }
    exponent += exp_negative ? -exp_value : exp_value;
    p = q;
  }
  *next = p;
  if (mantissa == 0) {
    out = negative ? -0.0 : 0.0;
    return NumberStatus::ok;
  }
  if (!truncated && mantissa <= (uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
    double value = static_cast<double>(mantissa);
    value = exponent < 0 ? value / detail::kPow10[-exponent] : value * detail::kPow10[exponent];
    out = negative ? -value : value;
    return NumberStatus::ok;
  }
  return detail::parse_slow(begin, p, negative, significant + exponent, out);
}

}  // namespace cntkio
