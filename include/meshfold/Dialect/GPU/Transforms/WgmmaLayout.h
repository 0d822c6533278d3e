//===- WgmmaLayout.h - Hopper warpgroup-MMA layouts -------------*- C++ -*-===//
//
// The layouts `mf-gpu-wgmma-contractions` relies on, as plain functions that
// the unit tests check against the PTX ISA's tables (sm_90a,
// `wgmma.mma_async`):
//
// - the accumulator fragment of `wgmma .m64nNk16` with f32 results: which
//   element of the 64 x N tile register r of thread t (0..127) of the
//   warpgroup holds;
// - the shared-memory matrix descriptor's bit fields;
// - the 128-byte swizzle that TMA writes and the descriptor reads (the
//   16-byte chunk c of row r of an 8-row, 1024-byte atom lies at chunk
//   c ^ (r mod 8)); the 64- and 32-byte swizzles of narrower rows.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_GPU_TRANSFORMS_WGMMALAYOUT_H
#define MESHFOLD_DIALECT_GPU_TRANSFORMS_WGMMALAYOUT_H

#include <cstdint>

namespace meshfold::wgmma {

/// Threads of a warpgroup, rows of one MMA, and the reduction per
/// instruction for 16-bit operands.
constexpr int64_t kThreads = 128, kRows = 64, kK16 = 16;

/// The accumulator element of register `r` of thread `t`: row =
/// rowOfThread(t) + rowOfRegister(r), column = colOfThread(t) +
/// colOfRegister(r). Each warp owns 16 rows; within them the layout is
/// mma.sync's m16n8 C fragment, repeated over the N / 8 column blocks.
constexpr int64_t rowOfThread(int64_t t) { return 16 * (t / 32) + t % 32 / 4; }
constexpr int64_t colOfThread(int64_t t) { return 2 * (t % 4); }
constexpr int64_t rowOfRegister(int64_t r) { return 8 * (r / 2 % 2); }
constexpr int64_t colOfRegister(int64_t r) { return 8 * (r / 4) + r % 2; }
/// f32 accumulator registers per thread of an m64nN tile.
constexpr int64_t registersPerThread(int64_t n) { return n / 2; }

/// Swizzle modes of the matrix descriptor (bits 62-63).
enum class Swizzle : uint64_t { None = 0, B128 = 1, B64 = 2, B32 = 3 };

/// The 64-bit shared-memory matrix descriptor: start address, leading and
/// stride byte offsets (each in 16-byte units, 14 bits), base offset (3
/// bits, 0 for 1024-byte aligned atoms) and swizzle mode.
constexpr uint64_t descriptor(uint64_t address, uint64_t leadingBytes,
                              uint64_t strideBytes, Swizzle swizzle,
                              uint64_t baseOffset = 0) {
  return ((address >> 4) & 0x3fff) | ((leadingBytes >> 4) & 0x3fff) << 16 |
         ((strideBytes >> 4) & 0x3fff) << 32 | (baseOffset & 7) << 49 |
         uint64_t(swizzle) << 62;
}

/// The swizzle mode whose span is a K-major tile's row of `rowBytes`
/// (128, 64 or 32: 64, 32 or 16 16-bit elements per row).
constexpr Swizzle swizzleOfRow(uint64_t rowBytes) {
  return rowBytes == 128  ? Swizzle::B128
         : rowBytes == 64 ? Swizzle::B64
                          : Swizzle::B32;
}
/// A K-major operand tile whose rows of `rowBytes` are swizzled over their
/// own span: atoms of 8 rows, 8 * rowBytes apart (the stride byte offset);
/// the leading byte offset is unused for these layouts (1 by convention).
/// The descriptor of such a tile at address 0 (the address is ORed in).
constexpr uint64_t kMajorSwizzled(uint64_t rowBytes) {
  return descriptor(0, 16, 8 * rowBytes, swizzleOfRow(rowBytes));
}
/// The largest atom (128-byte rows): tiles start at multiples of it.
constexpr uint64_t kAtomBytes = 1024;

/// Where TMA's 128-byte swizzle puts byte `offset` of a row-major tile of
/// 128-byte rows (offsets relative to a 1024-byte aligned start).
constexpr uint64_t swizzle128(uint64_t offset) {
  return offset ^ ((offset >> 7 & 7) << 4);
}

} // namespace meshfold::wgmma

#endif // MESHFOLD_DIALECT_GPU_TRANSFORMS_WGMMALAYOUT_H
