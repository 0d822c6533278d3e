//===- WgmmaContractions.cpp - linear layers on Hopper tensor cores -------===//
//
// A linear layer `out[m, n] += a[m, k] * widen(w[n, k])` with bf16 weights
// becomes, for sm_90a, a kernel whose warpgroup multiplies 128 x 128 tiles
// with `wgmma.mma_async` on operands that TMA copies into shared memory,
// three stages ahead, under mbarriers (see the pass's description in
// Passes.td, and WgmmaLayout.h for the descriptor and fragment layouts).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/BF16Linear.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/WgmmaLayout.h"

#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#define DEBUG_TYPE "mf-gpu-wgmma-contractions"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUWGMMACONTRACTIONSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {

/// TMA's swizzle of the span the matrix descriptor's swizzle `s` covers, so
/// that the copy lays tiles out as the MMAs read them.
nvgpu::TensorMapSwizzleKind tmaSwizzle(wgmma::Swizzle s) {
  switch (s) {
  case wgmma::Swizzle::B128:
    return nvgpu::TensorMapSwizzleKind::SWIZZLE_128B;
  case wgmma::Swizzle::B64:
    return nvgpu::TensorMapSwizzleKind::SWIZZLE_64B;
  case wgmma::Swizzle::B32:
    return nvgpu::TensorMapSwizzleKind::SWIZZLE_32B;
  case wgmma::Swizzle::None:
    break;
  }
  return nvgpu::TensorMapSwizzleKind::SWIZZLE_NONE;
}

/// The block tile's rows of `out` and the stages; the tile's columns are
/// the widest of kTileNs that divides N, the reduction per stage the
/// widest of kTileKs that divides K (one swizzled row of 128, 64 or 32
/// bytes of bf16).
constexpr int64_t kTileM = 128, kStages = 3;
constexpr int64_t kTileNs[] = {128, 64, 32, 16, 8};
constexpr int64_t kTileKs[] = {64, 32, 16};
/// The m64 MMAs per block tile.
constexpr int64_t kMmasM = kTileM / wgmma::kRows;
/// Bytes past the dynamic shared memory's symbol that the stages start
/// beyond (the static mbarriers may lie there), and the shared memory asked
/// for beside the stages: the skip and up to an atom to align.
constexpr int64_t kStaticSkip = 64;
constexpr int64_t kSharedSlack = kStaticSkip + int64_t(wgmma::kAtomBytes);

/// The widest of `tiles` that divides `extent` (0: none).
int64_t widestDividing(int64_t extent, ArrayRef<int64_t> tiles) {
  for (int64_t t : tiles)
    if (extent % t == 0)
      return t;
  return 0;
}

/// The linear layers this pass takes: those the tiles divide, whose weight
/// rows (and start, where it is static) are 16-byte aligned as TMA needs
/// (a dynamic start is one expert of a stack of N x K weights: a multiple
/// of K elements, 16 bytes with K a multiple of 16).
bool fitsTiles(const ContractionMatch &c) {
  auto [n, k] = weightShape(c);
  SmallVector<int64_t> strides;
  int64_t offset;
  auto w = cast<MemRefType>(c.in1->get().getType());
  if (failed(w.getStridesAndOffset(strides, offset)) ||
      ShapedType::isDynamic(strides[0]) || strides[0] % 8 != 0 ||
      (!ShapedType::isDynamic(offset) && offset % 8 != 0))
    return false;
  return widestDividing(n, kTileNs) && widestDividing(k, kTileKs);
}

class WgmmaEmitter {
public:
  WgmmaEmitter(const ContractionMatch &c, OpBuilder &builder)
      : c(c), b(c.op.getLoc(), builder) {
    std::tie(n, k) = weightShape(c);
    tileN = widestDividing(n, kTileNs);
    tileK = widestDividing(k, kTileKs);
    stageBytes = tileBytes(kTileM) + tileBytes(tileN);
  }

  /// Emits the operands' bf16 copy, their descriptors and the launch, for
  /// a non-empty `a` (TMA refuses a dimension of 0).
  void emit() {
    Value rows = memref::DimOp::create(b, c.in0->get(), 0);
    Value any =
        arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, rows, cst(0));
    auto guard = scf::IfOp::create(b, any, /*withElseRegion=*/false);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
    Value a16 = roundActivationsToBF16(b, c, rows);
    Value descA = tmaDescriptor(a16, kTileM);
    Value descW = tmaDescriptor(c.in1->get(), tileN);
    Value gridM = arith::CeilDivSIOp::create(b, rows, cst(kTileM));
    Value shared = arith::ConstantIntOp::create(
        b, b.getI32Type(), kStages * stageBytes + kSharedSlack);
    auto launch = gpu::LaunchOp::create(b, gridM, cst(n / tileN), cst(1),
                                        cst(wgmma::kThreads), cst(1), cst(1),
                                        shared, /*asyncTokenType=*/nullptr);
    b.setInsertionPointToEnd(&launch.getBody().front());
    gpu::TerminatorOp::create(b);
    b.setInsertionPointToStart(&launch.getBody().front());
    Kernel kernel{launch.getThreadIds().x,
                  muli(launch.getBlockIds().x, cst(kTileM)),
                  muli(launch.getBlockIds().y, cst(tileN)),
                  rows,
                  descA,
                  descW};
    emitKernel(kernel);
    b.setInsertionPointAfter(launch);
    freeDeviceBuffer(b, c.op.getLoc(), a16);
  }

private:
  /// What the kernel body works with: the thread, its tile's first row and
  /// column, the rows of `a`, the two TMA descriptors; then the shared
  /// memory's aligned start, the mbarriers and whether this is thread 0.
  struct Kernel {
    Value thread, m0, n0, rows, descA, descW;
    Value base, barriers, leader;
  };

  Value cst(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value i64(int64_t v) {
    return arith::ConstantIntOp::create(b, b.getI64Type(), v);
  }
  Value addi(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value muli(Value x, Value y) { return arith::MulIOp::create(b, x, y); }

  /// Bytes of a row of a tile (one stage's reduction), and of a tile of
  /// `rows` rows.
  int64_t rowBytes() const { return tileK * 2; }
  int64_t tileBytes(int64_t rows) const { return rows * rowBytes(); }

  /// The TMA descriptor type of tiles of `rows` x tileK bf16, each row
  /// swizzled over its span.
  nvgpu::TensorMapDescriptorType tensorMapType(int64_t rows) {
    auto tile = MemRefType::get(
        {rows, tileK}, b.getBF16Type(), MemRefLayoutAttrInterface{},
        gpu::AddressSpaceAttr::get(b.getContext(),
                                   gpu::AddressSpace::Workgroup));
    return nvgpu::TensorMapDescriptorType::get(
        b.getContext(), tile, tmaSwizzle(wgmma::swizzleOfRow(rowBytes())),
        nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
        nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  }

  /// The TMA descriptor of a [rows, K] bf16 operand, boxes of `tileRows`
  /// rows.
  Value tmaDescriptor(Value operand, int64_t tileRows) {
    auto unranked = UnrankedMemRefType::get(b.getBF16Type(), 0);
    Value cast = memref::CastOp::create(b, unranked, operand);
    return nvgpu::TmaCreateDescriptorOp::create(
        b, tensorMapType(tileRows), cast,
        ValueRange{cst(tileRows), cst(tileK)});
  }

  void emitKernel(Kernel &kn) {
    setUpSharedMemory(kn);
    int64_t steps = k / tileK;
    for (int64_t s = 0; s < std::min(kStages, steps); ++s)
      issueLoads(kn, cst(s), cst(s));
    Type acc = accumulatorType();
    SmallVector<Value> init(kMmasM, LLVM::ZeroOp::create(b, acc));
    auto loop = scf::ForOp::create(b, cst(0), cst(steps), cst(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Value> accs =
          multiplyStage(kn, loop.getInductionVar(), loop.getRegionIterArgs());
      refill(kn, loop.getInductionVar(), steps);
      scf::YieldOp::create(b, accs);
    }
    store(kn, loop.getResults());
  }

  /// The stages' start: the first multiple of 1024 bytes (the largest
  /// swizzle atom) at least kStaticSkip bytes past the dynamic shared
  /// memory's symbol, so that the static mbarriers, wherever ptxas puts them
  /// beside that symbol, are never under a tile. Then the mbarriers,
  /// initialized by thread 0 and fenced for the asynchronous proxy.
  void setUpSharedMemory(Kernel &kn) {
    auto space = gpu::AddressSpaceAttr::get(b.getContext(),
                                            gpu::AddressSpace::Workgroup);
    Value raw = gpu::DynamicSharedMemoryOp::create(
        b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                           MemRefLayoutAttrInterface{}, space));
    sharedBytes = raw;
    Value address = memref::ExtractAlignedPointerAsIndexOp::create(b, raw);
    Value atom = cst(wgmma::kAtomBytes);
    Value misalign =
        arith::RemUIOp::create(b, addi(address, cst(kStaticSkip)), atom);
    kn.base = addi(cst(kStaticSkip),
                   arith::RemUIOp::create(
                       b, arith::SubIOp::create(b, atom, misalign), atom));
    sharedAddress = address;
    kn.leader =
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, kn.thread, cst(0));
    kn.barriers = nvgpu::MBarrierCreateOp::create(
        b, nvgpu::MBarrierGroupType::get(b.getContext(), space, kStages));
    for (int64_t s = 0; s < kStages; ++s)
      nvgpu::MBarrierInitOp::create(b, kn.barriers, cst(1), cst(s), kn.leader);
    NVVM::FenceMbarrierInitOp::create(b);
    gpu::BarrierOp::create(b);
  }

  /// Byte offset of stage `s`'s `a` tile (operand 0) or `w` tile (1) from
  /// the dynamic shared memory's start.
  Value stageOffset(const Kernel &kn, Value s, int64_t operand) {
    return addi(kn.base, addi(muli(s, cst(stageBytes)),
                              cst(operand * tileBytes(kTileM))));
  }

  Value tileView(const Kernel &kn, Value s, int64_t operand) {
    auto tile = tensorMapType(operand ? tileN : kTileM).getTensor();
    return memref::ViewOp::create(b, tile, sharedBytes,
                                  stageOffset(kn, s, operand), ValueRange{});
  }

  /// Thread 0 has TMA copy reduction step `step`'s tiles into stage `s`.
  void issueLoads(const Kernel &kn, Value s, Value step) {
    nvgpu::MBarrierArriveExpectTxOp::create(b, kn.barriers, cst(stageBytes), s,
                                            kn.leader);
    Value k0 = muli(step, cst(tileK));
    nvgpu::TmaAsyncLoadOp::create(b, tileView(kn, s, 0), kn.barriers, kn.descA,
                                  ValueRange{k0, kn.m0}, s,
                                  /*multicastMask=*/nullptr, kn.leader);
    nvgpu::TmaAsyncLoadOp::create(b, tileView(kn, s, 1), kn.barriers, kn.descW,
                                  ValueRange{k0, kn.n0}, s,
                                  /*multicastMask=*/nullptr, kn.leader);
  }

  Type accumulatorType() {
    SmallVector<Type> regs(wgmma::registersPerThread(tileN), b.getF32Type());
    return LLVM::LLVMStructType::getLiteral(b.getContext(), regs);
  }

  /// The matrix descriptor of the tile at byte `offset` of shared memory.
  Value descriptorAt(Value offset) {
    Value address = arith::IndexCastUIOp::create(b, b.getI64Type(),
                                                 addi(sharedAddress, offset));
    Value field = arith::AndIOp::create(
        b, arith::ShRUIOp::create(b, address, i64(4)), i64(0x3fff));
    return arith::OrIOp::create(
        b, field, i64(int64_t(wgmma::kMajorSwizzled(rowBytes()))));
  }

  /// Waits for step `step`'s stage and multiplies it into the accumulators.
  SmallVector<Value> multiplyStage(const Kernel &kn, Value step,
                                   ValueRange accs) {
    Value s = arith::RemUIOp::create(b, step, cst(kStages));
    Value round = arith::DivUIOp::create(b, step, cst(kStages));
    Value parity = arith::TruncIOp::create(
        b, b.getI1Type(),
        arith::IndexCastUIOp::create(b, b.getI64Type(), round));
    nvgpu::MBarrierTryWaitParityOp::create(b, kn.barriers, parity,
                                           cst(10000000), s);
    Value descA = descriptorAt(stageOffset(kn, s, 0));
    Value descW = descriptorAt(stageOffset(kn, s, 1));
    NVVM::WgmmaFenceAlignedOp::create(b);
    SmallVector<Value> out(accs);
    MLIRContext *ctx = b.getContext();
    auto bf16 = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::bf16);
    auto f32 = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
    auto scaleIn = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
    for (int64_t i = 0; i < kMmasM; ++i)
      for (int64_t kk = 0; kk < tileK / wgmma::kK16; ++kk) {
        // k16 steps move 32 bytes along the swizzled rows; the second m64
        // block starts 64 rows (8 atoms) further.
        int64_t stepA = (kk * 32 + i * tileBytes(wgmma::kRows)) >> 4;
        Value a = arith::AddIOp::create(b, descA, i64(stepA));
        Value w = arith::AddIOp::create(b, descW, i64((kk * 32) >> 4));
        out[i] = NVVM::WgmmaMmaAsyncOp::create(
            b, out[i].getType(), out[i], a, w,
            NVVM::MMAShapeAttr::get(ctx, wgmma::kRows, tileN, wgmma::kK16),
            bf16, bf16, f32,
            NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one),
            scaleIn, scaleIn,
            NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row),
            NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col),
            /*satfinite=*/nullptr);
      }
    NVVM::WgmmaGroupSyncAlignedOp::create(b);
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
    return out;
  }

  /// Once every warp is done with stage `step % 3`, thread 0 refills it
  /// with step `step + 3`.
  void refill(const Kernel &kn, Value step, int64_t steps) {
    gpu::BarrierOp::create(b);
    Value next = addi(step, cst(kStages));
    Value more =
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, next, cst(steps));
    auto ifOp = scf::IfOp::create(b, more, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    issueLoads(kn, arith::RemUIOp::create(b, step, cst(kStages)), next);
  }

  /// Adds each accumulator register to its element of `out` (rows inside).
  void store(const Kernel &kn, ValueRange accs) {
    Value t = kn.thread;
    Value warpRows = muli(arith::DivUIOp::create(b, t, cst(32)), cst(16));
    Value lane = arith::RemUIOp::create(b, t, cst(32));
    Value threadRow = addi(warpRows, arith::DivUIOp::create(b, lane, cst(4)));
    Value threadCol = muli(arith::RemUIOp::create(b, lane, cst(4)), cst(2));
    int64_t regs = wgmma::registersPerThread(tileN);
    for (int64_t i = 0; i < kMmasM; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        // Registers 4j + 2 * half + {0, 1}: one row, columns 8j + {0, 1}.
        int64_t rowOffset = i * wgmma::kRows + wgmma::rowOfRegister(2 * half);
        Value row = addi(kn.m0, addi(threadRow, cst(rowOffset)));
        Value inside =
            arith::CmpIOp::create(b, arith::CmpIPredicate::slt, row, kn.rows);
        auto ifOp = scf::IfOp::create(b, inside, /*withElseRegion=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
        for (int64_t r = 2 * half; r < regs; r += 4)
          for (int64_t odd = 0; odd < 2; ++odd) {
            Value col = addi(
                kn.n0, addi(threadCol, cst(wgmma::colOfRegister(r + odd))));
            Value v = LLVM::ExtractValueOp::create(b, accs[i], r + odd);
            Value old =
                memref::LoadOp::create(b, c.out->get(), ValueRange{row, col});
            memref::StoreOp::create(b, arith::AddFOp::create(b, old, v),
                                    c.out->get(), ValueRange{row, col});
          }
      }
  }

  const ContractionMatch &c;
  ImplicitLocOpBuilder b;
  /// N and K of the weight, the block tile's columns and reduction, a
  /// stage's bytes.
  int64_t n = 0, k = 0, tileN = 0, tileK = 0, stageBytes = 0;
  Value sharedBytes, sharedAddress;
};

struct MFGPUWgmmaContractionsPass
    : public meshfold::impl::MFGPUWgmmaContractionsPassBase<
          MFGPUWgmmaContractionsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<ContractionMatch> found;
    getOperation().walk([&](linalg::GenericOp op) {
      if (std::optional<ContractionMatch> c = matchBF16Linear(op);
          c && fitsTiles(*c))
        found.push_back(*c);
    });
    for (ContractionMatch &c : found) {
      OpBuilder b(c.op);
      WgmmaEmitter(c, b).emit();
      c.op.erase();
    }
  }
};
} // namespace
