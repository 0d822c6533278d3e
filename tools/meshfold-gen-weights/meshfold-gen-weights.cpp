//===- meshfold-gen-weights.cpp - deterministic weights for a moe model ---===//
//
// meshfold-gen-weights model.mlir --seed S -o w.safetensors [--dtype f32|bf16]
//
// Writes one tensor per weight the model names (stacked expert weights are
// written per expert, as in a Hugging Face checkpoint). Values depend only on
// the seed and the tensor's name (mfrt/io/RandomWeights.h), so the same
// weight gets the same values in any model that names it, and an emitted
// program run with --random-weights S computes on the same values.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Version.h"

#include "mfrt/io/RandomWeights.h"
#include "mfrt/io/Safetensors.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include <algorithm>
#include <cstring>

#include <unistd.h>

using namespace mlir;
using namespace meshfold;
namespace cl = llvm::cl;

static cl::OptionCategory cat("meshfold-gen-weights options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string>
    outputFile("o", cl::desc("Output safetensors (a folder with --shards)"),
               cl::value_desc("file"), cl::Required, cl::cat(cat));
static cl::opt<uint64_t> seed("seed", cl::desc("Random seed"), cl::init(0),
                              cl::cat(cat));
static cl::opt<unsigned> shards(
    "shards",
    cl::desc("Write a checkpoint folder -o DIR as Hugging Face shards it: "
             "K files model-0000i-of-0000K.safetensors and "
             "model.safetensors.index.json (default: one file -o FILE)"),
    cl::init(0), cl::cat(cat));
static cl::opt<bool>
    quiet("quiet", cl::desc("No progress line (shown on a terminal otherwise)"),
          cl::cat(cat));
static cl::opt<std::string> dtype("dtype", cl::desc("f32 (default) or bf16"),
                                  cl::init("f32"), cl::cat(cat));

namespace {
[[noreturn]] void die(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "meshfold-gen-weights") << msg << "\n";
  std::exit(1);
}

/// Elements of a tensor of `shape`.
int64_t product(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

/// The tensors in checkpoint order, by name and shape.
using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

/// Parses the model `inputFile` (its diagnostics printed as they come).
OwningOpRef<ModuleOp> parseModel(MLIRContext &ctx) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buf = openInputFile(inputFile, &error);
  if (!buf)
    die(error);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(buf), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sm, &ctx);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sm, &ctx);
  if (!module)
    die("cannot parse '" + inputFile + "'");
  return module;
}

/// The tensors the model's moe.param ops name, in checkpoint order: each
/// expert of a stacked weight apart.
TensorList listTensors(ModuleOp module) {
  TensorList tensors;
  llvm::StringSet<> seen;
  module->walk([&](moe::ParamOp op) {
    if (!seen.insert(op.getName()).second)
      return;
    ArrayRef<int64_t> shape = op.getType().getShape();
    if (!op.isStackedExperts()) {
      tensors.push_back({op.getName().str(), {shape.begin(), shape.end()}});
      return;
    }
    std::string name = op.getName().str();
    size_t at = name.find("{e}");
    for (int64_t e = 0; e < shape[0]; ++e)
      tensors.push_back(
          {name.substr(0, at) + std::to_string(e) + name.substr(at + 3),
           {shape.begin() + 1, shape.end()}});
  });
  if (tensors.empty())
    die("'" + inputFile + "' names no weights (no moe.param ops)");
  return tensors;
}

/// The shard of each tensor: shard i takes the tensors that start in its
/// share of the `total` bytes, and every shard gets at least one.
std::vector<unsigned> assignShards(const TensorList &tensors,
                                   unsigned numShards, uint64_t elementBytes,
                                   uint64_t total) {
  std::vector<unsigned> shardOf;
  uint64_t before = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    unsigned shard = 0;
    if (t > 0) {
      const unsigned last = shardOf.back();
      const uint64_t byteShard =
          before * numShards / std::max<uint64_t>(total, 1);
      shard = unsigned(std::clamp<uint64_t>(byteShard, last, last + 1));
      // Leave a tensor for each shard still empty.
      if (numShards - 1 - last >= tensors.size() - t)
        shard = last + 1;
      shard = std::min(shard, numShards - 1);
    }
    shardOf.push_back(shard);
    before += uint64_t(product(tensors[t].second)) * elementBytes;
  }
  return shardOf;
}

/// The tensor `name`'s values in the storage type --dtype asks for.
void encode(StringRef name, ArrayRef<int64_t> dims,
            std::vector<uint8_t> &bytes) {
  mfrt::randomWeightBytes(name.str(), {dims.begin(), dims.end()},
                          dtype == "f32" ? mfrt::DType::F32 : mfrt::DType::BF16,
                          seed, bytes);
}

/// Writes the tensors to -o: one file, or with --shards a folder of shard
/// files and their index, with a progress line on a terminal.
class CheckpointWriter {
public:
  CheckpointWriter(const TensorList &tensors, std::vector<unsigned> shardOf,
                   unsigned numShards, uint64_t total)
      : tensors(tensors), shardOf(std::move(shardOf)), numShards(numShards),
        total(total) {}

  /// Writes every shard (the one file without --shards), then the index.
  void write();

private:
  std::string shardName(unsigned i) const {
    return llvm::formatv("model-{0:d5}-of-{1:d5}.safetensors", i + 1, numShards)
        .str();
  }
  void showProgress();
  /// Writes shard `i`, whose tensors start at `first`; returns the index
  /// after its last.
  unsigned writeShard(unsigned i, unsigned first);
  void writeIndex();

  const TensorList &tensors;
  std::vector<unsigned> shardOf;
  unsigned numShards;
  uint64_t total;
  llvm::json::Object weightMap;
  // Progress on a terminal: the bytes written so far.
  bool progress = false;
  uint64_t written = 0;
};

void CheckpointWriter::write() {
  if (shards) {
    std::error_code ec = llvm::sys::fs::create_directories(outputFile);
    if (ec)
      die("cannot create the folder '" + outputFile + "': " + ec.message());
  }
  progress = !quiet && ::isatty(STDERR_FILENO);
  for (unsigned i = 0, first = 0; i < numShards; ++i)
    first = writeShard(i, first);
  if (progress)
    llvm::errs() << "\n";
  if (shards)
    writeIndex();
}

void CheckpointWriter::showProgress() {
  if (progress)
    llvm::errs() << llvm::format(
        "\rgenerating weights: %3d%% (%.1f of %.1f MB)",
        int(written * 100 / std::max<uint64_t>(total, 1)),
        double(written) / 1e6, double(total) / 1e6);
}

unsigned CheckpointWriter::writeShard(unsigned i, unsigned first) {
  mfrt::SafetensorsWriter writer;
  writer.setMetadata("format", "pt");
  writer.setMetadata("generator",
                     "meshfold-gen-weights seed=" + std::to_string(seed));
  unsigned end = first;
  for (; end < tensors.size() && shardOf[end] == i; ++end) {
    const auto &[name, dims] = tensors[end];
    writer.declare(name, dtype == "f32" ? mfrt::DType::F32 : mfrt::DType::BF16,
                   dims);
    weightMap[name] = shardName(i);
  }
  // Each tensor is generated as the writer reaches it: the file is never
  // held whole.
  auto produce = [&](size_t index, std::vector<uint8_t> &bytes) {
    const auto &[name, dims] = tensors[first + index];
    encode(name, dims, bytes);
    written += bytes.size();
    showProgress();
    return true;
  };
  SmallString<256> path(outputFile.getValue());
  if (shards)
    llvm::sys::path::append(path, shardName(i));
  std::string error;
  if (!writer.write(std::string(path), &error, produce)) {
    if (progress)
      llvm::errs() << "\n";
    die(error);
  }
  return end;
}

void CheckpointWriter::writeIndex() {
  SmallString<256> indexPath(outputFile.getValue());
  llvm::sys::path::append(indexPath, "model.safetensors.index.json");
  llvm::json::Object index{
      {"metadata", llvm::json::Object{{"total_size", int64_t(total)}}},
      {"weight_map", std::move(weightMap)}};
  std::error_code ec;
  llvm::raw_fd_ostream os(indexPath, ec);
  if (ec)
    die("cannot write '" + indexPath + "': " + ec.message());
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(index))) << "\n";
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-gen-weights: deterministic weights with Hugging Face names\n\n"
      "  meshfold-gen-weights model.mlir --seed 1 -o w.safetensors "
      "[--dtype bf16]\n");
  if (dtype != "f32" && dtype != "bf16")
    die("--dtype must be f32 or bf16, got '" + dtype + "'");

  DialectRegistry registry;
  registry.insert<moe::MoEDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  MLIRContext ctx(registry);
  ctx.allowUnregisteredDialects(false);
  OwningOpRef<ModuleOp> module = parseModel(ctx);
  TensorList tensors = listTensors(*module);

  const unsigned numShards = shards ? unsigned(shards) : 1;
  if (numShards > tensors.size())
    die("--shards " + llvm::Twine(numShards) + " is more than the " +
        llvm::Twine(tensors.size()) + " tensors");
  const uint64_t elementBytes = dtype == "f32" ? 4 : 2;
  uint64_t total = 0;
  for (const auto &[name, dims] : tensors)
    total += uint64_t(product(dims)) * elementBytes;
  CheckpointWriter(tensors,
                   assignShards(tensors, numShards, elementBytes, total),
                   numShards, total)
      .write();
  return 0;
}
