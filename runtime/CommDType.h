//===- CommDType.h - Element types of the comm runtime ----------*- C++ -*-===//
//
// Sizes and fp32 conversions of the mfrt_dtype element types. Header-only so
// that the backend plugins (libmfrt_mpi.so, libmfrt_nccl.so) stay
// self-contained.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_RUNTIME_COMMDTYPE_H
#define MESHFOLD_RUNTIME_COMMDTYPE_H

#include "mfrt.h"

#include <cstdint>
#include <cstring>

namespace mfrt::comm {

/// Bytes per element; 0 for an unknown dtype.
inline size_t dtypeSize(mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    return 4;
  case MFRT_BF16:
  case MFRT_F16:
    return 2;
  }
  return 0;
}

inline const char *dtypeName(mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    return "f32";
  case MFRT_BF16:
    return "bf16";
  case MFRT_F16:
    return "f16";
  }
  return "unknown";
}

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// bf16 -> f32 (exact).
inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

/// f32 -> bf16, rounding to nearest even; NaN stays a quiet NaN.
inline uint16_t floatToBF16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE binary16 -> f32 (exact).
inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) // inf / NaN
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return bitsFloat(sign);
    // Subnormal: mant * 2^-24.
    float f = float(mant) * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// f32 -> IEEE binary16, rounding to nearest even (overflow -> inf).
inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN
    return uint16_t(sign | 0x7e00u);
  if (a >= 0x477ff000u) // rounds to >= 65520: inf
    return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) { // below the smallest normal (2^-14): subnormal
    // Round a / 2^-24 to an integer, nearest even.
    float v = bitsFloat(a) * 16777216.0f;
    uint32_t i = uint32_t(v);
    float frac = v - float(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u)))
      ++i;
    return uint16_t(sign | i);
  }
  uint32_t exp = (a >> 23) - 112u;
  uint32_t mant = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h; // may carry into the exponent, which is right
  return uint16_t(sign | h);
}

/// Element i of a buffer of `dtype`, as f32.
inline float loadElement(const void *data, int64_t i, mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    return static_cast<const float *>(data)[i];
  case MFRT_BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case MFRT_F16:
    return f16ToFloat(static_cast<const uint16_t *>(data)[i]);
  }
  return 0;
}

/// Stores f32 `value` rounded to `dtype` as element i.
inline void storeElement(void *data, int64_t i, float value, mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    static_cast<float *>(data)[i] = value;
    return;
  case MFRT_BF16:
    static_cast<uint16_t *>(data)[i] = floatToBF16(value);
    return;
  case MFRT_F16:
    static_cast<uint16_t *>(data)[i] = floatToF16(value);
    return;
  }
}

} // namespace mfrt::comm

#endif // MESHFOLD_RUNTIME_COMMDTYPE_H
