//===- CommDType.h - Element types of the comm runtime ----------*- C++ -*-===//
//
// Sizes of the mfrt_dtype element types, and element loads and stores through
// f32 (the codec is meshfold/Support/DType.h). Header-only so that the backend
// plugins (libmfrt_mpi.so, libmfrt_nccl.so) stay self-contained.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_COMMDTYPE_H
#define MFRT_COMM_COMMDTYPE_H

#include "mfrt/mfrt.h"
#include "meshfold/Support/DType.h"

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

/// Element i of a buffer of `dtype`, as f32.
inline float loadElement(const void *data, int64_t i, mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    return static_cast<const float *>(data)[i];
  case MFRT_BF16:
    return meshfold::bf16ToF32(static_cast<const uint16_t *>(data)[i]);
  case MFRT_F16:
    return meshfold::f16ToF32(static_cast<const uint16_t *>(data)[i]);
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
    static_cast<uint16_t *>(data)[i] = meshfold::f32ToBF16(value);
    return;
  case MFRT_F16:
    static_cast<uint16_t *>(data)[i] = meshfold::f32ToF16(value);
    return;
  }
}

} // namespace mfrt::comm

#endif // MFRT_COMM_COMMDTYPE_H
