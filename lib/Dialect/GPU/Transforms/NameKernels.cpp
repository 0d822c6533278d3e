//===- NameKernels.cpp - kernel names after the ops they come from --------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"

#include <cctype>

#define DEBUG_TYPE "mf-gpu-name-kernels"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUNAMEKERNELSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// The first NameLoc name in `loc` ("" when none).
StringRef findName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().getValue();
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location l : fused.getLocations())
      if (StringRef n = findName(l); !n.empty())
        return n;
    return "";
  }
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return findName(call.getCallee());
  return "";
}

/// "moe.rms_norm" -> "rms_norm", "mf.all_gather" -> "mf_all_gather"; any
/// character that a PTX identifier cannot hold becomes '_'.
std::string kernelStem(StringRef opName) {
  if (opName.empty())
    return "kernel";
  opName.consume_front("moe.");
  std::string stem;
  for (char c : opName)
    stem += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return stem;
}

struct MFGPUNameKernelsPass
    : public meshfold::impl::MFGPUNameKernelsPassBase<MFGPUNameKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    auto module = FlatSymbolRefAttr::get(ctx, moduleName);
    unsigned counter = 0;
    getOperation().walk([&](gpu::LaunchOp launch) {
      std::string name = kernelStem(findName(launch.getLoc())) + "_" +
                         std::to_string(counter++);
      launch.setModuleAttr(module);
      launch.setFunctionAttr(FlatSymbolRefAttr::get(ctx, name));
    });
  }
};
} // namespace
