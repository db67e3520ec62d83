// Number scanning for CTF values: CNTK's accepted grammar, correctly rounded values.
//
// Grammar (exactly CNTK's): [+-]? DIGITS ( "." DIGITS* )? ( [eE] [+-]? DIGITS )?
// A "." not followed by a digit ends the number (so "45." is 45 and "1.e5" stops at "e").
// Values are rounded to double exactly as Python's float() does; Clinger's fast path covers the
// common case and std::from_chars (correctly rounded) the rest.
#pragma once

#include <charconv>
#include <cstring>
#include <cstdint>
#include <string>

namespace cntkio {

enum class NumberStatus : uint8_t { ok, syntax, out_of_range };

inline bool is_digit(unsigned char c) { return static_cast<unsigned>(c - '0') < 10u; }

namespace detail {

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Decimal exponent of the first significant digit of a validated token (for range errors).
inline int64_t decimal_magnitude(const std::string& text) {
  int64_t magnitude = 0;
  bool seen_point = false, seen_digit = false;
  size_t i = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    const char c = text[i];
    if (c == '.') {
      seen_point = true;
    } else if (is_digit(static_cast<unsigned char>(c))) {
      if (c != '0' && !seen_digit) seen_digit = true;
      if (seen_digit && !seen_point) ++magnitude;
      if (!seen_digit && seen_point) --magnitude;
    }
  }
  if (i < text.size()) {
    int64_t exp_value = 0;
    const bool negative = i + 1 < text.size() && text[i + 1] == '-';
    for (++i; i < text.size(); ++i) {
      if (is_digit(static_cast<unsigned char>(text[i])) && exp_value < 100000000) exp_value = exp_value * 10 + (text[i] - '0');
    }
    magnitude += negative ? -exp_value : exp_value;
  }
  return magnitude;
}

// Slow path: hand the validated token to from_chars, which rejects '+' and a bare trailing '.'.
inline NumberStatus parse_slow(const char* begin, const char* end, bool negative, double& out) {
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
    if (decimal_magnitude(text) > 0) return NumberStatus::out_of_range;
    out = negative ? -0.0 : 0.0;  // total underflow rounds to zero, as float() does
    return NumberStatus::ok;
  }
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) return NumberStatus::syntax;
  out = value;
  return NumberStatus::ok;
}

}  // namespace detail

// Reads the run of ASCII digits at p (at most 8), using one 8-byte load; p + 8 must be readable.
// Returns how many digits there were and adds them to `mantissa`.
inline int take_digits8(const char* p, uint64_t& mantissa) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  const uint64_t values = word ^ 0x3030303030303030ULL;  // digits become 0..9
  // A byte is not a digit when its value is >= 10; carries only move to later bytes, which are
  // then past the first non-digit anyway.
  const uint64_t non_digit = ((values + 0x7676767676767676ULL) | values) & 0x8080808080808080ULL;
  const int count = non_digit ? __builtin_ctzll(non_digit) / 8 : 8;
  if (count == 0) return 0;
  uint64_t digits = values << (64 - 8 * count);  // the digits, most significant first, in the top bytes
  digits = ((digits * 2561) >> 8) & 0x00FF00FF00FF00FFULL;
  digits = ((digits * 6553601) >> 16) & 0x0000FFFF0000FFFFULL;
  digits = (digits * 42949672960001ULL) >> 32;
  static constexpr uint64_t kScale[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
  mantissa = mantissa * kScale[count] + digits;
  return count;
}

// Scans one number starting at p. The buffer must hold, somewhere after p, a byte that cannot
// continue a number (the parser guarantees a final '\n'), so no end pointer is needed; 8-byte
// loads are used at positions up to `fast_limit` (the buffer's end minus 8). On success
// stores the value, sets *next to the first byte after the number and returns ok. On a syntax
// error *next points at the offending byte.
inline NumberStatus scan_number(const char* p, const char* fast_limit, double& out, const char** next) {
  const char* begin = p;
  const bool negative = *p == '-';
  p += (*p == '-' || *p == '+');
  const char* digits = p;
  uint64_t mantissa = 0;
  while (is_digit(static_cast<unsigned char>(*p))) mantissa = mantissa * 10 + static_cast<unsigned>(*p++ - '0');
  int64_t count = p - digits;
  if (count == 0) {
    *next = p;
    return NumberStatus::syntax;
  }
  int64_t exponent = 0;
  bool exponent_allowed = true;
  if (*p == '.') {
    ++p;
    const char* fraction = p;
    if (p <= fast_limit) {
      int taken = 8;
      while (taken == 8 && p <= fast_limit && p - fraction < 16) p += (taken = take_digits8(p, mantissa));
    }
    while (is_digit(static_cast<unsigned char>(*p))) mantissa = mantissa * 10 + static_cast<unsigned>(*p++ - '0');
    exponent = fraction - p;
    count += p - fraction;
    exponent_allowed = p != fraction;  // "45." ends here; "1.e5" is 1 followed by a stray "e5"
  }
  if (exponent_allowed && (*p == 'e' || *p == 'E')) {
    const char* q = p + 1;
    const bool exp_negative = *q == '-';
    q += (*q == '-' || *q == '+');
    if (!is_digit(static_cast<unsigned char>(*q))) {
      *next = q;
      return NumberStatus::syntax;
    }
    int64_t exp_value = 0;
    for (; is_digit(static_cast<unsigned char>(*q)); ++q) {
      if (exp_value < 100000000) exp_value = exp_value * 10 + (*q - '0');
    }
    exponent += exp_negative ? -exp_value : exp_value;
    p = q;
  }
  *next = p;
  if (count > 19) return detail::parse_slow(begin, p, negative, out);
  if (mantissa == 0) {
    out = negative ? -0.0 : 0.0;
    return NumberStatus::ok;
  }
  if (mantissa <= (uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
    double value = static_cast<double>(mantissa);
    value = exponent < 0 ? value / detail::kPow10[-exponent] : value * detail::kPow10[exponent];
    out = negative ? -value : value;
    return NumberStatus::ok;
  }
  return detail::parse_slow(begin, p, negative, out);
}

}  // namespace cntkio
