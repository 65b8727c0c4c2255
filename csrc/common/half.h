// float16 / bfloat16 <-> float32 conversions (round to nearest even), used by the reduce kernels.
#pragma once

#include <cstdint>
#include <cstring>

namespace pscore {

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Every conversion below selects instead of branching, so the kernels' loops vectorise.
inline uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_bits(f);
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;  // exponent and mantissa
  // Normal: rebias the exponent (15 -> 127); infinity and NaN: the all-ones exponent;
  // subnormal (and zero): the mantissa's value, mantissa x 2^-24, exact in float.
  const uint32_t normal = (magnitude << 13) + (112u << 23);
  const uint32_t special = (magnitude << 13) | 0x7f800000u;
  const float subnormal = static_cast<float>(magnitude) * 0x1p-24f;
  const uint32_t bits = magnitude >= 0x7c00u ? special : normal;
  return bits_float((magnitude < 0x0400u ? float_bits(subnormal) : bits) | sign);
}

// Round to nearest, ties to even; NaN becomes the quiet NaN, magnitudes that round past 65504
// infinity.
inline uint16_t float_to_half(float f) {
  const uint32_t bits = float_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal in half (from 2^-14): rebias, then round the 13 dropped bits; a carry moves to the
  // next exponent, as it should.
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal in half: the value in units of 2^-24, rounded by the float addition of 2^23
  // (to nearest even, the default mode); below 2^-25 it rounds to zero.
  const float units = bits_float(magnitude) * 0x1p24f + 0x1p23f;
  const uint32_t subnormal = float_bits(units) - float_bits(0x1p23f);
  uint32_t half = magnitude >= 0x38800000u ? normal : subnormal;
  half = magnitude >= 0x477ff000u ? 0x7c00u : half;
  half = magnitude > 0x7f800000u ? 0x7e00u : half;
  return static_cast<uint16_t>(sign | half);
}

}  // namespace pscore
