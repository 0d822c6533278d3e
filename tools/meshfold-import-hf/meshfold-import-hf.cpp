//===- meshfold-import-hf.cpp - HF config.json to a moe model -------------===//
//
// meshfold-import-hf CONFIG.json -o model.mlir [--num-layers N]
//
// Reads a Hugging Face config of a supported MoE architecture (Mixtral,
// Qwen3-MoE, OLMoE, Qwen2-MoE, DeepSeek-V3; MeshfoldImporter's HFConfig) and
// writes the model as `moe` ops on global shapes, weights named as in that
// architecture's checkpoint (MeshfoldModelBuilder's buildMoEModel).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Importer/HFConfig.h"
#include "meshfold/Importer/ModelBuilder.h"
#include "meshfold/Version.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace meshfold;
namespace cl = llvm::cl;

static cl::OptionCategory cat("meshfold-import-hf options");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<config.json or checkpoint "
                                               "folder>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string> outputFile("o", cl::desc("Output model (.mlir)"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));
static cl::opt<int64_t>
    numLayersOpt("num-layers",
                 cl::desc("Keep only the first N layers (default: all)"),
                 cl::value_desc("N"), cl::init(-1), cl::cat(cat));

namespace {
/// Prints `msg` as the tool's one-line error and exits with 1.
[[noreturn]] void die(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "meshfold-import-hf") << msg << "\n";
  std::exit(1);
}

/// The config the input names (a config.json, or a checkpoint folder's),
/// cut to --num-layers where given; sets `inputFile` to the config read.
HFConfig readConfig() {
  // A checkpoint folder: its config.json (and generation_config.json beside
  // it).
  if (llvm::sys::fs::is_directory(inputFile)) {
    SmallString<256> config(inputFile.getValue());
    llvm::sys::path::append(config, "config.json");
    if (!llvm::sys::fs::exists(config))
      die(inputFile + ": a checkpoint folder must hold config.json");
    inputFile = std::string(config);
  }
  HFConfig c;
  std::string error;
  if (!readHFConfig(inputFile, c, error))
    die(error);
  if (numLayersOpt.getNumOccurrences() &&
      (numLayersOpt < 1 || numLayersOpt > c.layers))
    die("--num-layers must be between 1 and num_hidden_layers (" +
        llvm::Twine(c.layers) + "), got " + llvm::Twine(numLayersOpt));
  if (numLayersOpt.getNumOccurrences())
    c.layers = numLayersOpt;
  return c;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-import-hf: a Hugging Face MoE config.json to a moe model\n\n"
      "  meshfold-import-hf config.json -o model.mlir [--num-layers N]\n"
      "  meshfold-import-hf CHECKPOINT_DIR -o model.mlir  (its config.json)\n");
  HFConfig c = readConfig();

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = buildMoEModel(ctx, c, inputFile);
  if (!module)
    die("internal: the imported model does not verify");

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(outputFile, &error);
  if (!out)
    die(error);
  out->os() << "// " << describeModel(c) << "\n";
  module->print(out->os());
  out->keep();
  return 0;
}
