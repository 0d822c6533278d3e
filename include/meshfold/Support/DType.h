//===- DType.h - The element-type codec -------------------------*- C++ -*-===//
//
// Conversions between f32 and the 16-bit float formats that weights, the KV
// cache and messages are stored in (bf16, IEEE binary16), and the fp8 e4m3
// of block-quantized checkpoints (decoded at load). One codec for the
// compiler's tools and the runtime; inline because the runtime converts
// whole tensors element by element.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_DTYPE_H
#define MESHFOLD_SUPPORT_DTYPE_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace meshfold {

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// Converts f32 to bf16, rounding to nearest even. NaN stays a (quiet) NaN.
inline uint16_t f32ToBF16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a quiet NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

/// Converts bf16 to f32 (exact).
inline float bf16ToF32(uint16_t value) {
  return bitsToFloat(static_cast<uint32_t>(value) << 16);
}

/// Converts IEEE half to f32 (exact; handles subnormals, inf and NaN).
inline float f16ToF32(uint16_t value) {
  uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// `value >> shift` (0 < shift < 32) rounded to nearest, ties to even: the
/// rounding of the narrower float formats, whose bits are the top bits of
/// the rebiased f32 bits (a carry into the exponent is the correct
/// rounding).
inline uint32_t shiftRightNearestEven(uint32_t value, uint32_t shift) {
  uint32_t result = value >> shift;
  uint32_t remainder = value & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (result & 1u)))
    ++result;
  return result;
}

/// Converts f32 to IEEE half, rounding to nearest even; overflow gives inf,
/// NaN stays a quiet NaN with the top bits of its payload.
inline uint16_t f32ToF16(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN
    return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);
  if (magnitude >= 0x47800000u) // >= 65536 (and inf): overflows to inf.
    return sign | 0x7c00u;
  uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {
    // Half subnormal (or zero): value = m * 2^-24 with m = M >> shift.
    if (exponent < 101)
      return sign;
    uint32_t fullMantissa = (magnitude & 0x7fffffu) | 0x800000u;
    return sign | static_cast<uint16_t>(
                      shiftRightNearestEven(fullMantissa, 126 - exponent));
  }
  // Rebiased (127 -> 15), the top 16 bits are the half.
  return sign | static_cast<uint16_t>(
                    shiftRightNearestEven(magnitude - (112u << 23), 13));
}

/// Converts fp8 e4m3 ("e4m3fn": bias 7, no infinities, S.1111.111 is NaN;
/// safetensors' F8_E4M3) to f32 (exact).
inline float f8E4M3ToF32(uint8_t value) {
  uint32_t sign = static_cast<uint32_t>(value & 0x80u) << 24;
  uint32_t exponent = (value >> 3) & 0xfu;
  uint32_t mantissa = value & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u)
    return bitsToFloat(sign | 0x7fc00000u);
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-9, exact in f32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    return sign ? -magnitude : magnitude;
  }
  return bitsToFloat(sign | ((exponent + 120) << 23) | (mantissa << 20));
}

/// Converts f32 to fp8 e4m3 (e4m3fn), rounding to nearest even. Values
/// beyond the largest finite one (448) saturate to +-448; NaN stays NaN.
inline uint8_t f32ToF8E4M3(float value) {
  uint32_t bits = floatBits(value);
  uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN
    return sign | 0x7fu;
  if (magnitude >= 0x43e00000u) // >= 448 (and inf): saturates.
    return sign | 0x7eu;
  uint32_t exponent = magnitude >> 23;
  if (exponent < 121) {
    // e4m3 subnormal (or zero): value = m * 2^-9 with m = M >> shift (8,
    // the smallest normal, where it rounds up).
    if (exponent < 110)
      return sign;
    uint32_t fullMantissa = (magnitude & 0x7fffffu) | 0x800000u;
    return sign | static_cast<uint8_t>(
                      shiftRightNearestEven(fullMantissa, 141 - exponent));
  }
  // Rebiased (127 -> 7), the top 8 bits are the e4m3; rounding past 448
  // saturates.
  uint32_t result = shiftRightNearestEven(magnitude - (120u << 23), 20);
  return sign | static_cast<uint8_t>(result > 0x7eu ? 0x7eu : result);
}

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_DTYPE_H
