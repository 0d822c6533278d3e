//===- ModelBuilder.h - A moe model from a Hugging Face config --*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Builds the `moe` dialect model an HFConfig describes: one `prefill`
/// function of token ids, its layers as `moe.layer` ops on global shapes,
/// every weight a `moe.param` named as in the architecture's checkpoint.
/// Kept apart from MeshfoldImporter, which reads the config with LLVM Support
/// only.
///
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_IMPORTER_MODELBUILDER_H
#define MESHFOLD_IMPORTER_MODELBUILDER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace meshfold {

struct HFConfig;

/// Builds the model \p config describes (all of its `layers`) in \p ctx,
/// loading the dialects it uses; \p path names the config in the locations.
/// Returns null where the built module does not verify (a bug of the
/// builder, never of the config: HFConfig has checked it).
mlir::OwningOpRef<mlir::ModuleOp> buildMoEModel(mlir::MLIRContext &ctx,
                                                const HFConfig &config,
                                                llvm::StringRef path);

/// A one-line summary of \p config (architecture, sizes, attention, experts),
/// without a trailing newline, e.g. `MixtralForCausalLM: 8 layers, d 64, 8
/// heads (4 KV, d_h 8), 32 experts top-2, ffn 128, vocab 512`.
std::string describeModel(const HFConfig &config);

} // namespace meshfold

#endif // MESHFOLD_IMPORTER_MODELBUILDER_H
