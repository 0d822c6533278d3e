//===- cpu-ops.cpp - GFLOP/s of the compiler's CPU code per op class ------===//
//
// Benchmark (not a test). For each op class of a Mixtral layer (linear,
// router, experts, attention, LM head) it writes a one-op moe function whose
// operands are function arguments, lowers it with meshfold's own CPU pipeline
// (buildLowerToCPUPipeline, the one meshfold-compile runs), JIT-compiles it
// with MLIR's ExecutionEngine at the compile driver's optimisation level and
// target CPU, and times calls: median of --reps samples after a warm-up call
// (fewer when they reach --max-seconds; only the warm-up when it alone does;
// a sample of a short op averages enough calls to last 50 ms).
//
//   cpu-ops [--tokens T] [--reps R] [--classes linear,router,...]
//           [--max-seconds S] [--mcpu CPU] [-O N] [--shared-libs a.so,b.so]
//
// Shapes are those of bench/cpu-prefill.sh's model (hidden 1024, ffn 2816,
// 16 heads / 8 KV heads of 64, 8 experts top-2, vocab 32000). Output: one
// line per class, `op CLASS FLOPS SECONDS` (a class's time is the sum of its
// ops' medians), and a readable table on stderr. Useful flops only: causal
// attention counts the lower triangle, the experts count 2*T slots (the
// routing sends them evenly, T*2/8 per expert).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Config.h"
#include "meshfold/InitAll.h"
#include "meshfold/Pipelines/Pipelines.h"
#include "meshfold/Target/Compile.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace mlir;
namespace cl = llvm::cl;


static cl::OptionCategory cat("cpu-ops options");
static cl::opt<int64_t> tokens("tokens", cl::desc("Prompt tokens T"),
                               cl::init(256), cl::cat(cat));
static cl::opt<unsigned> reps("reps", cl::desc("Timed calls per op"),
                              cl::init(3), cl::cat(cat));
static cl::opt<double>
    maxSeconds("max-seconds",
               cl::desc("Stop repeating an op once its calls took this long "
                        "(at least one timed call)"),
               cl::init(60), cl::cat(cat));
static cl::opt<std::string>
    classes("classes", cl::desc("Comma-separated op classes"),
            cl::init("linear,router,experts,attention,lm_head"), cl::cat(cat));
static cl::opt<std::string>
    cpu("cpu", cl::desc("Target CPU, as meshfold-compile --cpu (default native)"),
        cl::init("native"), cl::cat(cat));
static cl::alias mcpu("mcpu", cl::desc("Alias for --cpu"), cl::aliasopt(cpu),
                      cl::cat(cat));
static cl::opt<unsigned> optLevel(
    "O", cl::desc("LLVM optimisation level; default: meshfold-compile's"),
    cl::init(meshfold::CodegenOptions().optLevel), cl::cat(cat), cl::Prefix);
static cl::opt<std::string> sharedLibs(
    "shared-libs",
    cl::desc("Comma-separated shared libraries the JIT resolves symbols in "
             "(default: the OpenMP runtime found at configure time)"),
    cl::init(MESHFOLD_OMP_LIBRARY), cl::cat(cat));

namespace {
constexpr int64_t kHidden = 1024, kFFN = 2816, kHeads = 16, kKVHeads = 8,
                  kHeadDim = 64, kExperts = 8, kTopK = 2, kVocab = 32000;

/// One argument of the function: a dense row-major buffer, or an index.
struct Arg {
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  int64_t index = 0;
  bool isIndex = false;
  /// The memref descriptor: allocated, aligned, offset, sizes, strides.
  std::vector<intptr_t> desc;

  void *data() {
    return f32.empty() ? static_cast<void *>(i64.data()) : f32.data();
  }
  void makeDescriptor() {
    desc = {reinterpret_cast<intptr_t>(data()),
            reinterpret_cast<intptr_t>(data()), 0};
    for (int64_t s : shape)
      desc.push_back(s);
    std::vector<intptr_t> strides(shape.size(), 1);
    for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
      strides[i] = strides[i + 1] * shape[i + 1];
    desc.insert(desc.end(), strides.begin(), strides.end());
  }
};

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

Arg randomF32(std::vector<int64_t> shape, std::mt19937 &rng, float scale) {
  Arg a;
  a.shape = std::move(shape);
  a.f32.resize(numel(a.shape));
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (float &v : a.f32)
    v = dist(rng);
  a.makeDescriptor();
  return a;
}

Arg fromF32(std::vector<int64_t> shape, std::vector<float> values) {
  Arg a;
  a.shape = std::move(shape);
  a.f32 = std::move(values);
  a.makeDescriptor();
  return a;
}

Arg fromI64(std::vector<int64_t> shape, std::vector<int64_t> values) {
  Arg a;
  a.shape = std::move(shape);
  a.i64 = std::move(values);
  a.makeDescriptor();
  return a;
}

Arg indexArg(int64_t v) {
  Arg a;
  a.isIndex = true;
  a.index = v;
  return a;
}

/// One op to time: the function @op (its source) and its arguments.
struct OpCase {
  std::string name;
  std::string source;
  std::vector<Arg> args;
  /// Ranks of the results (each returned memref is freed after a call).
  std::vector<unsigned> resultRanks;
  /// Times this op counts in its class (q and o share a shape, as k and v).
  int count = 1;
  double flops = 0;
};

std::string func(llvm::StringRef params, llvm::StringRef results,
                 llvm::StringRef body) {
  return ("func.func @op(" + params + ") -> (" + results + ") {\n" + body +
          "\n}\n")
      .str();
}

std::string dims(std::initializer_list<int64_t> ds, llvm::StringRef elt) {
  std::string s = "tensor<";
  for (int64_t d : ds)
    s += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return s + elt.str() + ">";
}

OpCase linearCase(llvm::StringRef name, int64_t t, int64_t out, int count,
                  std::mt19937 &rng) {
  std::string x = dims({-1, kHidden}, "f32"), w = dims({out, kHidden}, "f32"),
              y = dims({-1, out}, "f32");
  OpCase c;
  c.name = name.str();
  c.source = func("%x: " + x + ", %w: " + w, y,
                  "  %y = moe.linear %x, %w : " + x + ", " + w + " -> " + y +
                      "\n  return %y : " + y);
  c.args.push_back(randomF32({t, kHidden}, rng, 1.0f));
  c.args.push_back(randomF32({out, kHidden}, rng, 0.03f));
  c.resultRanks = {2};
  c.count = count;
  c.flops = 2.0 * t * kHidden * out;
  return c;
}

std::vector<OpCase> casesOf(llvm::StringRef cls, int64_t t, std::mt19937 &rng) {
  std::vector<OpCase> out;
  if (cls == "linear") {
    // q and o: [T, 1024] x [1024, 1024]^T; k and v: [T, 1024] x [512, 1024]^T.
    out.push_back(linearCase("q/o", t, kHeads * kHeadDim, 2, rng));
    out.push_back(linearCase("k/v", t, kKVHeads * kHeadDim, 2, rng));
  } else if (cls == "router") {
    std::string x = dims({-1, kHidden}, "f32"),
                g = dims({kExperts, kHidden}, "f32"),
                w = dims({-1, kTopK}, "f32"), i = dims({-1, kTopK}, "i64");
    OpCase c;
    c.name = "router";
    c.source =
        func("%x: " + x + ", %g: " + g, w + ", " + i,
             "  %w, %i = moe.router %x, %g {top_k = " + std::to_string(kTopK) +
                 " : i64, renormalize} : " + x + ", " + g + " -> " + w + ", " +
                 i + "\n  return %w, %i : " + w + ", " + i);
    c.args.push_back(randomF32({t, kHidden}, rng, 1.0f));
    c.args.push_back(randomF32({kExperts, kHidden}, rng, 0.03f));
    c.resultRanks = {2, 2};
    c.flops = 2.0 * t * kHidden * kExperts;
    out.push_back(std::move(c));
  } else if (cls == "experts") {
    std::string x = dims({-1, kHidden}, "f32"), w = dims({-1, kTopK}, "f32"),
                i = dims({-1, kTopK}, "i64"),
                w13 = dims({kExperts, kFFN, kHidden}, "f32"),
                w2 = dims({kExperts, kHidden, kFFN}, "f32");
    OpCase c;
    c.name = "experts";
    c.source = func("%x: " + x + ", %w: " + w + ", %i: " + i + ", %w1: " + w13 +
                        ", %w2: " + w2 + ", %w3: " + w13,
                    x,
                    "  %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : " + x +
                        ", " + w + ", " + i + ", " + w13 + ", " + w2 + ", " +
                        w13 + " -> " + x + "\n  return %y : " + x);
    c.args.push_back(randomF32({t, kHidden}, rng, 1.0f));
    // Slot s = t * top_k + k goes to expert s mod E: T*2/E slots per expert,
    // two distinct experts per token.
    std::vector<int64_t> ids(t * kTopK);
    for (int64_t s = 0; s < t * kTopK; ++s)
      ids[s] = s % kExperts;
    c.args.push_back(fromF32({t, kTopK}, std::vector<float>(t * kTopK, 0.5f)));
    c.args.push_back(fromI64({t, kTopK}, std::move(ids)));
    c.args.push_back(randomF32({kExperts, kFFN, kHidden}, rng, 0.03f));
    c.args.push_back(randomF32({kExperts, kHidden, kFFN}, rng, 0.02f));
    c.args.push_back(randomF32({kExperts, kFFN, kHidden}, rng, 0.03f));
    c.resultRanks = {2};
    c.flops = 2.0 * t * kTopK * 3 * kHidden * kFFN;
    out.push_back(std::move(c));
  } else if (cls == "attention") {
    std::string q = dims({-1, kHeads, kHeadDim}, "f32"),
                kv = dims({-1, kKVHeads, kHeadDim}, "f32"),
                p = dims({-1}, "i64");
    OpCase c;
    c.name = "attention";
    c.source = func("%q: " + q + ", %k: " + kv + ", %v: " + kv + ", %qp: " + p +
                        ", %kp: " + p,
                    q,
                    "  %o = moe.attention %q, %k, %v, %qp, %kp {scale = "
                    "0.125 : f32} : " +
                        q + ", " + kv + ", " + kv + ", " + p + ", " + p +
                        " -> " + q + "\n  return %o : " + q);
    c.args.push_back(randomF32({t, kHeads, kHeadDim}, rng, 1.0f));
    c.args.push_back(randomF32({t, kKVHeads, kHeadDim}, rng, 1.0f));
    c.args.push_back(randomF32({t, kKVHeads, kHeadDim}, rng, 1.0f));
    std::vector<int64_t> pos(t);
    for (int64_t i = 0; i < t; ++i)
      pos[i] = i;
    c.args.push_back(fromI64({t}, pos));
    c.args.push_back(fromI64({t}, pos));
    c.resultRanks = {3};
    // QK^T and PV per head over the causal triangle.
    c.flops = 2.0 * 2 * kHeads * kHeadDim * (double(t) * (t + 1) / 2);
    out.push_back(std::move(c));
  } else if (cls == "lm_head") {
    std::string x = dims({-1, kHidden}, "f32"),
                w = dims({kVocab, kHidden}, "f32"), p = dims({-1}, "i64"),
                y = dims({kVocab}, "f32");
    OpCase c;
    c.name = "lm_head";
    c.source =
        func("%x: " + x + ", %w: " + w + ", %p: " + p + ", %last: index", y,
             "  %y = moe.lm_head %x, %w, %p, %last : " + x + ", " + w + ", " +
                 p + " -> " + y + "\n  return %y : " + y);
    // The prompt's last row only: [1, 1024] x [32000, 1024]^T.
    c.args.push_back(randomF32({1, kHidden}, rng, 1.0f));
    c.args.push_back(randomF32({kVocab, kHidden}, rng, 0.03f));
    c.args.push_back(fromI64({1}, {t - 1}));
    c.args.push_back(indexArg(t - 1));
    c.resultRanks = {1};
    c.flops = 2.0 * kHidden * kVocab;
    out.push_back(std::move(c));
  }
  return out;
}

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::errs() << "cpu-ops: " << message << "\n";
  std::exit(1);
}

/// meshfold-compile's host target for --cpu.
const meshfold::HostTarget &hostTarget() {
  static std::optional<meshfold::HostTarget> host;
  if (!host) {
    std::string error;
    FailureOr<meshfold::HostTarget> resolved =
        meshfold::resolveHostTarget(cpu, error);
    if (failed(resolved))
      fail(error);
    host = *resolved;
  }
  return *host;
}

std::unique_ptr<llvm::TargetMachine> makeTargetMachine() {
  meshfold::CodegenOptions options;
  options.optLevel = optLevel;
  options.cpu = hostTarget().cpu;
  options.features = hostTarget().features;
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm =
      meshfold::createHostTargetMachine(options, error);
  if (!tm)
    fail(error);
  return tm;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Lowers, compiles and times `c`; returns the median seconds of a call, or
/// a negative number when the op could not be run (said on stderr).
double timeCase(MLIRContext &ctx, OpCase &c,
                llvm::ArrayRef<llvm::StringRef> libs) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(c.source, &ctx);
  if (!module)
    fail("cannot parse the " + c.name + " function:\n" + c.source);
  PassManager pm(&ctx);
  meshfold::CPUPipelineOptions options;
  options.entry = "op";
  options.vectorBits = hostTarget().vectorBits;
  meshfold::buildLowerToCPUPipeline(pm, options);
  if (failed(pm.run(*module))) {
    llvm::errs() << "cpu-ops: " << c.name
                 << ": the CPU pipeline failed on the one-op module\n";
    return -1;
  }

  for (llvm::StringRef lib : libs) {
    std::string error;
    if (llvm::sys::DynamicLibrary::LoadLibraryPermanently(lib.str().c_str(),
                                                          &error))
      fail("cannot load '" + lib + "': " + error);
  }

  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine();
  auto optimize =
      makeOptimizingTransformer(optLevel, /*sizeLevel=*/0, tm.get());
  // Every function the optimised code still calls must resolve in this
  // process or the shared libraries (the OpenMP runtime, where the code uses
  // it): an op whose code calls something unresolved is skipped, not left to
  // abort in the JIT's linker.
  auto transformer = [&](llvm::Module *m) -> llvm::Error {
    if (llvm::Error err = optimize(m))
      return err;
    for (llvm::Function &f : *m) {
      std::string name = f.getName().str();
      if (!f.isDeclaration() || f.isIntrinsic() || f.use_empty() ||
          llvm::sys::DynamicLibrary::SearchForAddressOfSymbol(name))
        continue;
      bool omp =
          f.getName().starts_with("__kmpc") || f.getName().starts_with("omp_");
      return llvm::createStringError(
          "the code calls '" + name + "', which no library given resolves" +
          (omp ? " (no OpenMP runtime: install libomp-dev or pass "
                 "--shared-libs)"
               : ""));
    }
    return llvm::Error::success();
  };
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  engineOptions.jitCodeGenOptLevel = tm->getOptLevel();
  engineOptions.sharedLibPaths = libs;
  auto engine = ExecutionEngine::create(*module, engineOptions, std::move(tm));
  if (!engine) {
    llvm::errs() << "cpu-ops: " << c.name
                 << ": skipped: " << llvm::toString(engine.takeError()) << "\n";
    return -1;
  }
  (*engine)->initialize();

  // _mlir_ciface_op(results *, arg descriptors *..., index...).
  size_t words = 0;
  for (unsigned rank : c.resultRanks)
    words += 3 + 2 * rank;
  std::vector<intptr_t> results(words);
  void *resultsPtr = results.data();
  std::vector<void *> descPtrs;
  for (Arg &a : c.args)
    descPtrs.push_back(a.isIndex ? nullptr : a.desc.data());
  std::vector<void *> packed = {&resultsPtr};
  for (size_t i = 0; i < c.args.size(); ++i)
    packed.push_back(c.args[i].isIndex ? static_cast<void *>(&c.args[i].index)
                                       : static_cast<void *>(&descPtrs[i]));
  auto call = [&]() {
    if (llvm::Error err = (*engine)->invokePacked("_mlir_ciface_op", packed))
      fail(c.name + ": " + llvm::toString(std::move(err)));
    size_t at = 0;
    for (unsigned rank : c.resultRanks) {
      std::free(reinterpret_cast<void *>(results[at]));
      at += 3 + 2 * rank;
    }
  };
  // A warm-up call; one that took --max-seconds is the only measurement.
  double t0 = now();
  call();
  double warm = now() - t0;
  if (warm >= maxSeconds)
    return warm;
  // A sample of a short op averages enough calls to last 50 ms.
  int calls = std::max(1, int(0.05 / std::max(warm, 1e-9)));
  std::vector<double> times;
  double spent = 0;
  for (unsigned r = 0; r < std::max(1u, unsigned(reps)); ++r) {
    double start = now();
    for (int i = 0; i < calls; ++i)
      call();
    double dt = (now() - start) / calls;
    times.push_back(dt);
    spent += dt * calls;
    if (spent >= maxSeconds)
      break;
  }
  std::sort(times.begin(), times.end());
  size_t n = times.size();
  return n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "GFLOP/s of meshfold's CPU code per op class (one-op functions lowered "
      "by the CPU pipeline, JIT-compiled)\n");
  if (tokens < 8 || tokens % (kExperts / kTopK) != 0)
    fail("--tokens must be a multiple of 4, at least 8");
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  meshfold::registerMeshfoldDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  llvm::SmallVector<llvm::StringRef> libs;
  for (llvm::StringRef lib : llvm::split(sharedLibs, ','))
    if (!lib.trim().empty())
      libs.push_back(lib.trim());
  if (libs.empty())
    llvm::errs() << "cpu-ops: no OpenMP runtime given (--shared-libs): code "
                    "that calls it will fail to link and be skipped\n";

  std::mt19937 rng(1);
  llvm::errs() << llvm::format("%-10s %-10s %12s %12s %10s\n", "class", "op",
                               "GFLOP", "median ms", "GFLOP/s");
  for (llvm::StringRef cls : llvm::split(classes, ',')) {
    std::vector<OpCase> cases = casesOf(cls, tokens, rng);
    if (cases.empty())
      fail("unknown op class '" + cls + "'");
    double flops = 0, seconds = 0;
    bool ok = true;
    for (OpCase &c : cases) {
      double s = timeCase(ctx, c, libs);
      if (s < 0) {
        ok = false;
        break;
      }
      llvm::errs() << llvm::format("%-10s %-10s %12.3f %12.3f %10.2f\n",
                                   cls.str().c_str(), c.name.c_str(),
                                   c.flops * 1e-9, s * 1e3, c.flops / s * 1e-9);
      flops += c.count * c.flops;
      seconds += c.count * s;
      // The arguments are large; free them before the next op's.
      c.args.clear();
    }
    if (ok)
      llvm::outs() << llvm::format("op %s %.0f %.9f\n", cls.str().c_str(),
                                   flops, seconds);
    else
      llvm::outs() << "op " << cls << " skipped\n";
    llvm::outs().flush();
  }
  return 0;
}
