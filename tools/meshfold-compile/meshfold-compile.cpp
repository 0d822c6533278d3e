//===- meshfold-compile.cpp - compile a moe model to an executable --------===//
//
// meshfold-compile model.mlir [plan flags] --target cpu -o prefill
// meshfold-compile model.mlir [plan flags] --target cuda --emit ptx -o k.ptx
// meshfold-compile model.mlir [plan flags] --decode-plan "tp=2 dp=8" -o gen
//
// A thin driver: parse, attach the plan, run the pipeline from the Pipelines
// library, emit an object and link it with the runtime.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Analysis/ExplainOrder.h"
#include "meshfold/Analysis/ExplainPlacement.h"
#include "meshfold/Analysis/MemoryReport.h"
#include "meshfold/Analysis/PlanSearch.h"
#include "meshfold/Config.h"
#include "meshfold/InitAll.h"
#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/Text.h"
#include "meshfold/Target/Compile.h"
#include "meshfold/Target/Pools.h"
#include "meshfold/Version.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>

#include <unistd.h>

using namespace mlir;
using namespace meshfold;
namespace cl = llvm::cl;

static cl::OptionCategory cat("meshfold-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::cat(cat));
static cl::opt<std::string>
    report("report",
           cl::desc("Print a report: memory (per-rank weights and KV cache)"),
           cl::cat(cat));
static cl::opt<int64_t>
    maxPrompt("max-prompt",
              cl::desc("Prompt length the memory report sizes the KV cache "
                       "for"),
              cl::init(4096), cl::cat(cat));
static cl::opt<int64_t>
    kvBlock("kv-block",
            cl::desc("Rows per block of the program's paged K/V cache that "
                     "the memory report's KV budget counts (default 16)"),
            cl::init(16), cl::cat(cat));
static cl::opt<int64_t> maxNewTokens(
    "max-new-tokens",
    cl::desc("Tokens the memory report's KV cache also holds per request "
             "(generation after prefill; needs --decode or --decode-plan)"),
    cl::init(0), cl::cat(cat));
static cl::opt<std::string>
    memoryDType("memory-dtype",
                cl::desc("Element type the memory report assumes: bf16 "
                         "(default, as on GPUs; --weight-dtype when given) "
                         "or f32"),
                cl::init("bf16"), cl::cat(cat));
static cl::opt<std::string> weightDType(
    "weight-dtype",
    cl::desc("Storage type of the weights in the program: f32 or bf16 "
             "(default: f32 for --target cpu, bf16 for --target cuda); "
             "computation and accumulation stay f32"),
    cl::cat(cat));
static cl::opt<int64_t> gpuLoopsOnCPU(
    "gpu-loops-on-cpu",
    cl::desc("Testing aid for the CUDA target, with --target cpu: build the "
             "program from the CUDA kernels' loop nests (blocks of this many "
             "threads) run sequentially on the CPU, to check the kernels' "
             "decomposition against the plain CPU program"),
    cl::init(0), cl::cat(cat));
static cl::opt<std::string>
    deviceMemory("device-memory",
                 cl::desc("Fail when a rank needs more than this (e.g. "
                          "141GB, 80GiB)"),
                 cl::cat(cat));
static cl::opt<std::string> target("target",
                                   cl::desc("Target: cpu (default) or cuda"),
                                   cl::init("cpu"), cl::cat(cat));
enum class Emit { Exe, Obj, LLVM, MLIR, PTX };
static cl::opt<Emit> emit(
    "emit", cl::desc("What to write"), cl::init(Emit::Exe),
    cl::values(clEnumValN(Emit::Exe, "exe", "a linked executable (default)"),
               clEnumValN(Emit::Obj, "obj", "an object file"),
               clEnumValN(Emit::LLVM, "llvm", "optimised LLVM IR"),
               clEnumValN(Emit::MLIR, "mlir", "the lowered LLVM-dialect MLIR"),
               clEnumValN(Emit::PTX, "ptx",
                          "the PTX of every kernel (--target cuda)")),
    cl::cat(cat));
static cl::opt<std::string>
    gpuChip("gpu-chip", cl::desc("GPU architecture of the kernels (cuda)"),
            cl::init("sm_90a"), cl::cat(cat));
static cl::opt<std::string>
    gpuFeatures("gpu-features",
                cl::desc("PTX features of the kernels (cuda), e.g. +ptx80"),
                cl::init("+ptx80"), cl::cat(cat));
static cl::opt<std::string> gpuFormat(
    "gpu-format",
    cl::desc("Kernel binaries embedded in obj/exe (cuda): fatbin (default: "
             "cubin and PTX), bin (cubin) or isa (PTX, compiled when loaded)"),
    cl::init("fatbin"), cl::cat(cat));
static cl::opt<std::string> cudaToolkit(
    "cuda-toolkit",
    cl::desc("CUDA toolkit root (ptxas, libdevice; default: the one found "
             "when meshfold was configured)"),
    cl::init(MESHFOLD_CUDA_ROOT), cl::cat(cat));
static cl::opt<unsigned> optLevel("O", cl::desc("LLVM optimisation level"),
                                  cl::init(2), cl::Prefix, cl::cat(cat));
static cl::opt<std::string>
    cpu("cpu",
        cl::desc("CPU the program runs on: native (default: this machine's, "
                 "with all its features) or an LLVM CPU name such as "
                 "x86-64-v3, x86-64-v4, znver4, sapphirerapids; the "
                 "contraction kernels are tiled for its vector width"),
        cl::init("native"), cl::cat(cat));
static cl::alias mcpu("mcpu", cl::desc("Alias for --cpu"), cl::aliasopt(cpu),
                      cl::cat(cat));
/// --cpu, resolved by checkTargetFlags.
static HostTarget host;
static cl::opt<std::string> runtimeDir(
    "runtime-dir",
    cl::desc("Directory holding libmfrt.a (default: ../lib beside this tool)"),
    cl::cat(cat));
static cl::opt<bool>
    quiet("quiet", cl::desc("No progress line (shown on a terminal otherwise)"),
          cl::cat(cat));
static cl::opt<bool> verbose("v", cl::desc("Print the stages and their times"),
                             cl::cat(cat));
// The plan flags: the plan options of the mf-partition pipeline.
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  static cl::opt<Type> Field(Flag, cl::desc(Description), cl::init(Default),   \
                             cl::cat(cat));
#include "meshfold/Support/PlanOptions.def"
static cl::opt<bool> explainOrder(
    "explain-order",
    cl::desc("Rank every order of the plan's axes by its analytic per-layer "
             "traffic (uniform routing, bf16, no overlap) and exit"),
    cl::cat(cat));
static cl::opt<double>
    explainTokens("tokens",
                  cl::desc("Prompt tokens per DP replica for --explain-order"),
                  cl::init(4096), cl::cat(cat));
static cl::opt<bool> suggestPlan(
    "suggest-plan",
    cl::desc("Rank every plan of --gpus GPUs (both meshes' sizes and axis "
             "orders) that passes the plan rules and fits --device-memory "
             "by modeled time per layer, print the best and exit; plan "
             "flags given fix those sizes"),
    cl::cat(cat));
static cl::opt<int64_t>
    suggestGPUs("gpus", cl::desc("GPUs for --suggest-plan (default 32)"),
                cl::init(32), cl::cat(cat));
static cl::opt<double>
    nvlinkGBps("nvlink-gbps",
               cl::desc("NVLink GB/s per GPU for --suggest-plan (default "
                        "450)"),
               cl::init(450), cl::cat(cat));
static cl::opt<double>
    ibGBps("ib-gbps",
           cl::desc("InfiniBand GB/s per GPU for --suggest-plan (default 50)"),
           cl::init(50), cl::cat(cat));
static cl::opt<double>
    tflops("tflops",
           cl::desc("Dense TFLOP/s of one GPU for --suggest-plan (default "
                    "989, an H200 in bf16)"),
           cl::init(989), cl::cat(cat));
static cl::opt<int64_t>
    suggestTop("top", cl::desc("Plans --suggest-plan prints (default 5)"),
               cl::init(5), cl::cat(cat));
static cl::opt<bool> decodeStep(
    "decode",
    cl::desc("Also compile the decode step (mf-derive-decode), so that the "
             "program can generate tokens after prefill (--max-new-tokens)"),
    cl::cat(cat));
static cl::opt<std::string> decodePlan(
    "decode-plan",
    cl::desc("Prefill and decode on separate pools: the decode pool's plan, "
             "in mf-partition's keys (e.g. \"tp=2 dp=8\"); the plan flags "
             "give the prefill pool's. The program runs on both pools' "
             "devices, the prefill pool's first"),
    cl::value_desc("plan"), cl::cat(cat));
static cl::opt<bool> promptLogprobs(
    "prompt-logprobs",
    cl::desc("Also output req{r}.prompt_logits [T, V]: the logits of every "
             "prompt position"),
    cl::cat(cat));
static cl::opt<bool> narrowLastLayer(
    "narrow-last-layer",
    cl::desc("Compute the last layer's attention and MoE only for the rows "
             "that reach an output (default on; =false computes every row, "
             "as engines do)"),
    cl::init(true), cl::cat(cat));
static cl::opt<bool> batchInvariant(
    "batch-invariant",
    cl::desc("CPU target: every contraction sums in one order whatever its "
             "row count, so a row's result does not depend on the rows it "
             "is computed with (prompt length, batch, --narrow-last-layer); "
             "costs speed where few rows run"),
    cl::cat(cat));
static cl::opt<bool> bf16Activations(
    "bf16-activations",
    cl::desc("CPU target with --weight-dtype bf16: round the activations a "
             "bf16 weight multiplies to bf16 and use the CPU's bf16 dot "
             "product (AVX512_BF16; default on where --cpu has it); "
             "=false keeps them f32 and widens the weights"),
    cl::cat(cat));
static cl::opt<std::string> gemmBackend(
    "gemm-backend",
    cl::desc("CUDA target: the linear layers with bf16 weights as generated "
             "kernels (generated, the default) or as cuBLASLt calls "
             "(cublaslt: bf16 operands, f32 accumulation; the peer of "
             "every GPU timing and a fallback)"),
    cl::init("generated"), cl::cat(cat));
static cl::opt<bool> wgmma(
    "wgmma",
    cl::desc("CUDA target, sm_90a: linear layers with bf16 weights on Hopper "
             "tensor cores (TMA, mbarriers, wgmma.mma_async; activations "
             "rounded to bf16, f32 accumulation). Off by default until a "
             "device run has checked its numerics"),
    cl::cat(cat));
static cl::opt<std::string> expertPlacement(
    "expert-placement",
    cl::desc("Place each layer's experts on the EP ranks from a routing "
             "file (a run's --routing-json): the busiest rank's rows kept "
             "low, hot experts replicated with --redundant-experts"),
    cl::value_desc("routing.json"), cl::cat(cat));
static cl::opt<int64_t> redundantExperts(
    "redundant-experts",
    cl::desc("With --expert-placement: extra replicas of the hottest experts "
             "per layer (EP must divide n_experts + R; default 0)"),
    cl::init(0), cl::cat(cat));
static cl::opt<bool> explainPlacement(
    "explain-placement",
    cl::desc("With --expert-placement: print each layer's experts per EP "
             "rank and the modeled rows per rank (max/mean) before and "
             "after; without -o, exit after it"),
    cl::cat(cat));
static cl::opt<std::string>
    dispatch("dispatch",
             cl::desc("EP dispatch: auto (hierarchical when an EP group "
                      "spans nodes), flat or hierarchical"),
             cl::init("auto"), cl::cat(cat));

/// Whether a progress line is open on the terminal (stderr).
static bool progressOpen = false;

/// Erases the progress line, if any.
static void clearProgress() {
  if (progressOpen)
    llvm::errs() << "\r\x1b[K";
  progressOpen = false;
}

/// Prints `msg` as the tool's one-line error.
static LogicalResult fail(const llvm::Twine &msg) {
  clearProgress();
  llvm::WithColor::error(llvm::errs(), "meshfold-compile") << msg << "\n";
  return failure();
}

/// With -v, prints each stage of the compilation with the seconds since the
/// timer was made.
class StageTimer {
public:
  /// A stage starts: with -v its name; on a terminal, a progress line.
  void begin(const char *what) {
    stageStart = std::chrono::steady_clock::now();
    if (verbose)
      llvm::errs() << llvm::format("[%7.3fs] ", since(start)) << what
                   << "...\n";
    else if (showProgress()) {
      llvm::errs() << "\r\x1b[Kmeshfold-compile: " << what << "...";
      progressOpen = true;
    }
  }
  /// The stage ends: with -v, what it did and its time.
  void operator()(const char *what) const {
    if (!verbose)
      return;
    llvm::errs() << llvm::format("[%7.3fs] ", since(start)) << what
                 << llvm::format(" (%.3f s)", since(stageStart)) << "\n";
  }
  ~StageTimer() { clearProgress(); }

private:
  static double since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  }
  static bool showProgress() { return !quiet && ::isatty(STDERR_FILENO); }

  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point stageStart = start;
};
/// Parses the command line: the tool's flags and the MLIR ones it takes.
static void parseCommandLine(int argc, char **argv) {
  registerPassManagerCLOptions();
  registerMLIRContextCLOptions();
  registerAsmPrinterCLOptions();
  setVersionPrinter();
  // The tool's own description of --ep: without --ep, EP is
  // tp*cp*dp / (etp*edp), but --ep 0 is an EP size of 0, which the plan rules
  // refuse (the pipeline option reads 0 as the default).
  ep.setDescription("Expert parallel size (default tp*cp*dp / (etp*edp))");
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-compile: compile a moe model to an SPMD executable\n\n"
      "  meshfold-compile model.mlir --target cpu -o prefill\n"
      "  meshfold-compile model.mlir --target cuda --emit ptx -o kernels.ptx\n"
      "  ./prefill --weights w.safetensors --prompts prompts.txt --out "
      "out.safetensors\n");
}

/// Checks the output, report and memory flags; sets `deviceBytes` to the
/// parsed --device-memory (-1 when not given).
static LogicalResult checkOutputFlags(int64_t &deviceBytes) {
  if (outputFile.empty() && report.empty() && !explainOrder && !suggestPlan &&
      !explainPlacement)
    return fail("-o FILE is required (or --report)");
  if (expertPlacement.empty() &&
      (redundantExperts.getNumOccurrences() || explainPlacement))
    return fail(std::string(explainPlacement ? "--explain-placement"
                                             : "--redundant-experts") +
                " needs --expert-placement FILE");
  if (!expertPlacement.empty() && suggestPlan)
    return fail("--expert-placement places the experts of one plan's EP "
                "ranks; it does not combine with --suggest-plan");
  if (!expertPlacement.empty() && !llvm::sys::fs::exists(expertPlacement))
    return fail("--expert-placement: cannot read '" + expertPlacement +
                "' (no such file)");
  if (suggestPlan && (suggestGPUs < 1 || suggestGPUs > (int64_t(1) << 20)))
    return fail("--gpus must be between 1 and 2^20, got " +
                llvm::Twine(int64_t(suggestGPUs)));
  if (batchInvariant && target == "cuda")
    return fail("--batch-invariant applies to the CPU target's kernels");
  if (suggestPlan && (!(nvlinkGBps > 0) || !(ibGBps > 0) || !(tflops > 0)))
    return fail("--nvlink-gbps, --ib-gbps and --tflops must be positive");
  if (suggestPlan && suggestTop < 1)
    return fail("--top must be positive");
  // An output that cannot be written fails now, not after the compile.
  if (!outputFile.empty() && outputFile != "-") {
    StringRef dir = llvm::sys::path::parent_path(outputFile);
    if (!dir.empty() && !llvm::sys::fs::is_directory(dir))
      return fail("cannot write '" + outputFile + "': folder '" + dir +
                  "' does not exist");
    if (llvm::sys::fs::is_directory(outputFile))
      return fail("cannot write '" + outputFile + "': it is a folder");
  }
  if (!report.empty() && report != "memory")
    return fail("--report must be memory, got '" + report + "'");
  if (memoryDType != "bf16" && memoryDType != "f32")
    return fail("--memory-dtype must be bf16 or f32, got '" + memoryDType +
                "'");
  deviceBytes = -1;
  if (!deviceMemory.empty() && (deviceBytes = parseByteSize(deviceMemory)) <= 0)
    return fail("--device-memory must be a size such as 141GB or 80GiB, got '" +
                deviceMemory + "'");
  if (maxPrompt < 1)
    return fail("--max-prompt must be positive");
  if (kvBlock < 1)
    return fail("--kv-block must be at least 1");
  if (maxNewTokens < 0)
    return fail("--max-new-tokens must be at least 0");
  if (maxNewTokens > 0 &&
      ((!decodeStep && decodePlan.empty()) || report != "memory"))
    return fail("--max-new-tokens sizes the memory report of a generating "
                "program: it needs --decode (or --decode-plan) and --report "
                "memory");
  return success();
}

/// The weights' storage type when --weight-dtype is not given: the target's
/// (f32 on the CPU, bf16 on CUDA). The memory report sizes the weights as
/// stored when the storage is asked for explicitly.
static void resolveWeightDType() {
  if (weightDType.getNumOccurrences() && !memoryDType.getNumOccurrences())
    memoryDType = std::string(weightDType);
  if (!weightDType.getNumOccurrences())
    weightDType = target == "cuda" ? "bf16" : "f32";
}

/// Checks --cuda-toolkit: ptxas and libdevice must be under it.
static LogicalResult checkCUDAToolkit() {
  llvm::SmallString<256> ptxas(cudaToolkit), libdevice(cudaToolkit);
  llvm::sys::path::append(ptxas, "bin", "ptxas");
  llvm::sys::path::append(libdevice, "nvvm", "libdevice");
  if (cudaToolkit.empty() || !llvm::sys::fs::exists(ptxas) ||
      !llvm::sys::fs::is_directory(libdevice))
    return fail("--target cuda needs the CUDA toolkit (bin/ptxas, "
                "nvvm/libdevice), not found at '" +
                cudaToolkit +
                "' (configure with -DMESHFOLD_CUDA_ROOT=DIR or pass "
                "--cuda-toolkit DIR)");
  return success();
}

/// Checks the target flags and resolves the weights' storage type.
static LogicalResult checkTargetFlags() {
  if (target != "cpu" && target != "cuda")
    return fail("--target must be cpu or cuda, got '" + target + "'");
  if (gpuLoopsOnCPU.getNumOccurrences() &&
      (target != "cpu" || gpuLoopsOnCPU < 1 || gpuLoopsOnCPU > 1024 ||
       !llvm::isPowerOf2_64(uint64_t(int64_t(gpuLoopsOnCPU)))))
    return fail("--gpu-loops-on-cpu needs --target cpu and a power of two of "
                "threads per block in 1..1024, got " +
                std::to_string(gpuLoopsOnCPU));
  if (weightDType.getNumOccurrences() && weightDType != "f32" &&
      weightDType != "bf16")
    return fail("--weight-dtype must be f32 or bf16, got '" + weightDType +
                "'");
  if (dispatch != "auto" && dispatch != "flat" && dispatch != "hierarchical")
    return fail("--dispatch must be auto, flat or hierarchical, got '" +
                dispatch + "'");
  resolveWeightDType();
  std::string error;
  FailureOr<HostTarget> resolved = resolveHostTarget(cpu, error);
  if (failed(resolved))
    return fail(error);
  host = *resolved;
  if (bf16Activations.getNumOccurrences() && target == "cuda")
    return fail("--bf16-activations applies to the CPU target's kernels");
  if (bf16Activations && !host.bf16Dot)
    return fail("--bf16-activations needs a CPU with AVX-512 and "
                "AVX512_BF16 (--cpu '" +
                std::string(cpu) + "' has not)");
  if (bf16Activations && weightDType != "bf16")
    return fail("--bf16-activations needs --weight-dtype bf16 (f32 weights "
                "multiply f32 activations)");
  if (!bf16Activations.getNumOccurrences())
    bf16Activations = host.bf16Dot;
  if (emit == Emit::PTX && target != "cuda")
    return fail("--emit ptx needs --target cuda");
  if (wgmma && target != "cuda")
    return fail("--wgmma needs --target cuda");
  if (gemmBackend != "generated" && gemmBackend != "cublaslt")
    return fail("--gemm-backend must be generated or cublaslt, got '" +
                gemmBackend + "'");
  if (gemmBackend == "cublaslt" && target != "cuda")
    return fail("--gemm-backend cublaslt needs --target cuda");
  if (target != "cuda")
    return success();
  if (gemmBackend == "cublaslt" && wgmma)
    return fail("--wgmma is the generated backend's; --gemm-backend cublaslt "
                "hands the same products to cuBLASLt");
  if (gemmBackend == "cublaslt" && !*MESHFOLD_CUBLASLT_LIBRARY_DIR)
    return fail("--gemm-backend cublaslt: no cuBLASLt (libcublasLt.so) was "
                "found in the CUDA toolkit when meshfold was configured");
  if (gemmBackend == "cublaslt" && weightDType != "bf16")
    return fail("--gemm-backend cublaslt needs --weight-dtype bf16 (cuBLASLt "
                "multiplies bf16 weights)");
  if (wgmma && gpuChip != "sm_90a")
    return fail("--wgmma needs --gpu-chip sm_90a (warpgroup MMA and TMA are "
                "Hopper's), got '" +
                gpuChip + "'");
  if (wgmma && weightDType != "bf16")
    return fail("--wgmma needs --weight-dtype bf16 (the tensor cores "
                "multiply bf16 weights)");
  if (gpuFormat != "fatbin" && gpuFormat != "bin" && gpuFormat != "isa")
    return fail("--gpu-format must be fatbin, bin or isa, got '" + gpuFormat +
                "'");
  return checkCUDAToolkit();
}

/// The directory of the runtime libraries: --runtime-dir, else ../lib beside
/// this executable.
static std::string findRuntimeDir(const char *argv0) {
  if (!runtimeDir.empty())
    return runtimeDir;
  std::string self = llvm::sys::fs::getMainExecutable(argv0, (void *)&fail);
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(dir, "..", "lib");
  return std::string(dir);
}

/// Fails before compiling when a CUDA executable could not be linked.
static LogicalResult checkRuntimeLibraries(llvm::StringRef rtDir) {
  if (target != "cuda" || emit != Emit::Exe || outputFile.empty())
    return success();
  llvm::SmallString<256> mgpu(rtDir);
  llvm::sys::path::append(mgpu, "libmfrt_cuda.a");
  if (!llvm::sys::fs::exists(mgpu))
    return fail("CUDA runtime library not found: '" + std::string(mgpu) +
                "' (build the mfrt_cuda target, or use --runtime-dir)");
  return success();
}

/// A context with the dialects, extensions and LLVM IR translations the
/// pipelines use.
static std::unique_ptr<MLIRContext> createContext() {
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  // gpu-module-to-binary translates the kernels to LLVM IR.
  registerAllToLLVMIRTranslations(registry);
  registerMeshfoldDialects(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadDialect<mf::MFDialect, moe::MoEDialect>();
  // Diagnostics name the op by location; dumping the module is noise here.
  context->printOpOnDiagnostic(false);
  return context;
}

/// Reads and parses the input file through `sourceMgr`.
static OwningOpRef<ModuleOp> parseInput(llvm::SourceMgr &sourceMgr,
                                        MLIRContext &context) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = openInputFile(inputFile, &error);
  if (!input) {
    (void)fail(error);
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    (void)fail("cannot parse '" + inputFile + "'");
  return module;
}

/// True when any plan flag is given.
static bool hasPlanFlags() {
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  if (Field.getNumOccurrences())                                               \
    return true;
#include "meshfold/Support/PlanOptions.def"
  return false;
}

/// The plan flags' values.
static PlanFlags planFlags() {
  PlanFlags flags;
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  flags.Field = Field;
#include "meshfold/Support/PlanOptions.def"
  return flags;
}

/// Sets the plan of `flags` on `module`, replacing its own, the way
/// meshfold-opt --mf-partition does: through mf-partition's plan options
/// (its first step, mf-set-plan). The flags have passed the plan rules.
static LogicalResult setPlan(ModuleOp module, const PlanFlags &flags) {
  PartitionPipelineOptions options;
  setPlanOptions(options, flags);
  PassManager pm(module.getContext());
  addSetPlan(pm, options);
  return pm.run(module);
}

/// Sets the plan of the plan flags on `module` when any of them is given,
/// replacing the module's own; a plan that breaks a rule is one line.
static LogicalResult setPlanFromFlags(ModuleOp module) {
  if (!hasPlanFlags())
    return success();
  PlanSpec spec;
  std::string error;
  if (ep.getNumOccurrences() && ep == 0)
    return fail("plan rule 'axis-size': axis 'ep' has size 0, but sizes must "
                "be >= 1");
  if (!PlanSpec::fromFlags(planFlags(), spec, &error))
    return fail(error);
  return setPlan(module, planFlags());
}

namespace {
/// --decode-plan's keys: mf-partition's plan options.
struct DecodePlanOptions : public PassPipelineOptions<DecodePlanOptions> {
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  Option<Type> Field{*this, Flag, llvm::cl::desc(Description),                 \
                     llvm::cl::init(Default)};
#include "meshfold/Support/PlanOptions.def"
};
} // namespace

/// The decode pool's plan (--decode-plan), on the plan flags' node size
/// unless it names its own: its flags and the plan they make.
static LogicalResult decodePlanSpec(PlanFlags &flags, PlanSpec &spec) {
  DecodePlanOptions options;
  options.gpusPerNode = gpusPerNode;
  std::string parseError;
  llvm::raw_string_ostream os(parseError);
  if (failed(options.parseFromString(decodePlan, os)))
    return fail("--decode-plan \"" + decodePlan +
                "\": " + StringRef(parseError).trim().split('\n').first +
                " (keys: tp, cp, dp, pp, etp, ep, edp, order, expert-order, "
                "gpus-per-node)");
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  flags.Field = options.Field;
#include "meshfold/Support/PlanOptions.def"
  std::string error;
  if (!PlanSpec::fromFlags(flags, spec, &error))
    return fail("--decode-plan: " + error);
  return success();
}

/// Checks the module's plan and the model against it, in the order the
/// rules are reported, as one line (the partitioning checks the same, with
/// the module's location).
static LogicalResult checkPlan(ModuleOp module) {
  FailureOr<std::string> error = mf::checkPlanAndModel(module);
  if (failed(error))
    return failure();
  return error->empty() ? success() : fail(*error);
}

/// --explain-order: prints the plan flags' axis orders ranked by traffic.
static LogicalResult explainOrders(ModuleOp module) {
  clearProgress();
  FailureOr<TrafficModelInput> model =
      getTrafficModelInput(module, /*hierarchical=*/dispatch != "flat");
  if (failed(model))
    return fail("--explain-order needs a model (moe ops) in the input");
  printOrderExplanation(llvm::outs(), planFlags(), *model, explainTokens);
  return success();
}

/// Runs the mf-partition pipeline on `module` for its plan, with the tool's
/// --dispatch (and the prompt's logits, when asked).
static LogicalResult runPartitionPipeline(ModuleOp module,
                                          bool withPromptLogprobs) {
  PassManager pm(module.getContext());
  if (failed(applyPassManagerCLOptions(pm)))
    return fail("bad pass manager options");
  PartitionPipelineOptions options;
  options.dispatch = dispatch;
  options.promptLogprobs = withPromptLogprobs;
  options.narrowLastLayer = narrowLastLayer;
  options.expertPlacement = expertPlacement;
  options.redundantExperts = redundantExperts;
  options.batchInvariant = batchInvariant;
  buildPartitionPipeline(pm, options);
  return pm.run(module);
}

/// --suggest-plan: the best plans of --gpus GPUs for the model, each sized
/// by partitioning a copy of the module for it.
static LogicalResult suggestPlans(ModuleOp module, int64_t deviceBytes) {
  clearProgress();
  FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
  if (failed(info))
    return failure();
  if (info->numLayers == 0)
    return fail("--suggest-plan needs a model (moe ops) in the input");
  PlanSearchOptions options;
  options.gpus = suggestGPUs;
  options.gpusPerNode = gpusPerNode;
  options.nvlinkGBps = nvlinkGBps;
  options.ibGBps = ibGBps;
  options.maxPrompt = maxPrompt;
  options.deviceBytes = deviceBytes;
  options.deviceMemory = deviceMemory;
  options.bytesPerElement = memoryDType == "bf16" ? 2 : 4;
  options.flops = tflops * 1e12;
  options.hierarchical = dispatch != "flat";
  options.top = suggestTop;
  // Plan flags given fix their sizes.
  std::string badSize;
  auto given = [&](auto &flag) -> int64_t {
    if (!flag.getNumOccurrences())
      return 0;
    if (int64_t(flag) < 1 && badSize.empty())
      badSize = "plan rule 'axis-size': axis '" + flag.ArgStr.str() +
                "' has size " + std::to_string(int64_t(flag)) +
                ", but sizes must be >= 1";
    return int64_t(flag);
  };
  options.fixed.tp = given(tp);
  options.fixed.cp = given(cp);
  options.fixed.dp = given(dp);
  options.fixed.pp = given(pp);
  options.fixed.etp = given(etp);
  options.fixed.ep = given(ep);
  options.fixed.edp = given(edp);
  if (!badSize.empty())
    return fail(badSize);
  auto exactMemory = [&](const PlanFlags &flags) -> FailureOr<RankMemory> {
    OwningOpRef<ModuleOp> copy = module.clone();
    if (failed(setPlan(*copy, flags)) ||
        failed(runPartitionPipeline(*copy, /*withPromptLogprobs=*/false)))
      return failure();
    FailureOr<std::vector<RankMemory>> ranks = computeMemoryReport(
        *copy, maxPrompt, options.bytesPerElement, "prefill");
    if (failed(ranks) || ranks->empty())
      return failure();
    return *std::max_element(ranks->begin(), ranks->end(),
                             [](const RankMemory &a, const RankMemory &b) {
                               return a.totalBytes() < b.totalBytes();
                             });
  };
  std::string error;
  FailureOr<std::vector<PlanCandidate>> plans =
      searchPlans(*info, options, exactMemory, error);
  if (failed(plans))
    return fail("--suggest-plan: " + error);
  printPlanSuggestions(llvm::outs(), *plans, options);
  return success();
}

/// With --expert-placement: checks, before partitioning, that `plan` has
/// expert parallelism, that --redundant-experts fits it, and that the
/// routing file is one of this model with every layer that has experts (the
/// pass checks the same; here each gets its one line).
static LogicalResult checkPlacementInput(ModuleOp module, mf::PlanAttr plan) {
  if (expertPlacement.empty())
    return success();
  std::optional<MeshLayout> layout =
      plan ? MeshLayout::create(plan.toPlanSpec(), nullptr) : std::nullopt;
  if (!layout || !layout->hasAxis("ep") || layout->axisSize("ep") < 2)
    return fail("--expert-placement needs expert parallelism: this plan's "
                "EP is 1 (add --ep N)");
  FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
  if (failed(info))
    return failure();
  RoutingFile routing;
  std::string error =
      readPlacementInput(module, *info, layout->axisSize("ep"),
                         redundantExperts, expertPlacement, routing);
  return error.empty() ? success() : fail(error);
}

/// Partitions `module` for its plan when the plan spans several devices, or
/// when prompt logprobs are asked for: they come from the partitioning's
/// head pass, so a one-rank program gets the one-device plan.
static LogicalResult partition(ModuleOp module, StageTimer &stage) {
  if (promptLogprobs && !module->hasAttr(mf::MFDialect::getPlanAttrName()) &&
      failed(setPlan(module, PlanFlags::singleDevice())))
    return failure();
  auto plan =
      module->getAttrOfType<mf::PlanAttr>(mf::MFDialect::getPlanAttrName());
  if (failed(checkPlacementInput(module, plan)))
    return failure();
  if (!plan || !(plan.getDevices() > 1 || promptLogprobs))
    return success();
  stage.begin("partitioning");
  if (failed(runPartitionPipeline(module, promptLogprobs)))
    return failure();
  stage("partitioned");
  return success();
}

/// After partitioning with --expert-placement: --explain-placement's
/// figures, and the check that the replicas' weights fit --device-memory
/// (`deviceBytes`, -1: not given).
static LogicalResult placementChecks(ModuleOp module, int64_t deviceBytes,
                                     StringRef pool = "") {
  if (expertPlacement.empty())
    return success();
  const int64_t bytes = memoryDType == "bf16" ? 2 : 4;
  if (explainPlacement) {
    clearProgress();
    FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
    RoutingFile routing;
    std::string error;
    if (failed(info) ||
        !readRoutingFile(expertPlacement, *info, routing, error))
      return fail(error.empty() ? "--explain-placement: no model" : error);
    if (!pool.empty())
      llvm::outs() << pool << " pool:\n";
    printPlacementExplanation(llvm::outs(), module, routing, bytes);
  }
  if (deviceBytes <= 0 || redundantExperts == 0)
    return success();
  FailureOr<std::vector<RankMemory>> memory = computeMemoryReport(
      module, maxPrompt, bytes,
      module.lookupSymbol("prefill") ? "prefill" : "decode", 0);
  if (failed(memory))
    return failure();
  // Blame the replicas only where the program fits without them.
  for (const RankMemory &m : *memory)
    if (m.totalBytes() > deviceBytes &&
        m.totalBytes() - m.replicaBytes <= deviceBytes)
      return fail("--redundant-experts " + std::to_string(redundantExperts) +
                  ": the replicas do not fit: rank " + std::to_string(m.rank) +
                  " needs " + std::to_string(m.totalBytes()) + " bytes (" +
                  std::to_string(m.replicaBytes) +
                  " of them the replicas' weights), more than the device "
                  "memory " +
                  deviceMemory);
  return success();
}

/// --report memory: prints the memory of every rank and fails when one does
/// not fit in --device-memory (`deviceBytes`). With --decode-plan, `pool`
/// is the decode pool's module: the prefill pool's ranks (`module`, prefill
/// only) hold K/V for the prompt until it moved, the decode pool's (the
/// step) for the prompt and the generated tokens.
static LogicalResult reportMemory(ModuleOp module, int64_t deviceBytes,
                                  ModuleOp pool = nullptr) {
  clearProgress();
  const int64_t bytes = memoryDType == "bf16" ? 2 : 4;
  FailureOr<std::vector<RankMemory>> memory =
      computeMemoryReport(module, maxPrompt, bytes,
                          // --decode: the step is the program's prefill.
                          module.lookupSymbol("prefill") ? "prefill" : "decode",
                          pool ? 0 : int64_t(maxNewTokens));
  if (failed(memory))
    return failure();
  int64_t decodeBase = 0;
  if (pool) {
    FailureOr<std::vector<RankMemory>> decode =
        computeMemoryReport(pool, maxPrompt, bytes, "decode", maxNewTokens);
    if (failed(decode))
      return failure();
    decodeBase = int64_t(memory->size());
    for (RankMemory m : *decode) {
      m.rank += decodeBase;
      memory->push_back(m);
    }
  }
  printMemoryReport(llvm::outs(), *memory, memoryDType, maxPrompt, maxNewTokens,
                    decodeBase);
  std::string error;
  if (failed(checkDeviceMemory(*memory, deviceBytes, deviceMemory, error)))
    return fail(error);
  if (deviceBytes > 0)
    printKVBudget(llvm::outs(), *memory, deviceBytes, deviceMemory, maxPrompt,
                  kvBlock);
  return success();
}

/// Lowers `module` to the LLVM dialect (and, for CUDA, kernel binaries) with
/// the target's pipeline.
static LogicalResult lower(ModuleOp module, StageTimer &stage) {
  PassManager pm(module.getContext());
  if (failed(applyPassManagerCLOptions(pm)))
    return fail("bad pass manager options");
  if (target == "cuda") {
    CUDAPipelineOptions options;
    options.chip = gpuChip;
    options.features = gpuFeatures;
    options.optLevel = optLevel;
    options.format = emit == Emit::PTX ? std::string("isa") : gpuFormat;
    options.toolkit = cudaToolkit;
    options.weightDType = weightDType;
    options.wgmma = wgmma;
    options.gemmBackend = gemmBackend;
    buildLowerToCUDAPipeline(pm, options);
  } else {
    CPUPipelineOptions options;
    options.weightDType = weightDType;
    options.gpuLoops = gpuLoopsOnCPU;
    options.vectorBits = host.vectorBits;
    options.batchInvariant = batchInvariant;
    options.bf16Dot = bf16Activations && weightDType == "bf16";
    buildLowerToCPUPipeline(pm, options);
  }
  if (failed(pm.run(module)))
    return fail("lowering '" + inputFile + "' failed");
  stage(target == "cuda" ? "lowered to kernels and host LLVM dialect"
                         : "lowered to the LLVM dialect");
  return success();
}

/// --emit ptx: one PTX module per outlined kernel module, each under a
/// comment line naming its gpu.binary.
static LogicalResult writePTX(ModuleOp module, StageTimer &stage) {
  stage.begin("writing PTX");
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(outputFile, &error);
  if (!out)
    return fail(error);
  size_t kernels = 0;
  for (auto binary : module.getOps<gpu::BinaryOp>())
    for (Attribute attr : binary.getObjects()) {
      auto object = cast<gpu::ObjectAttr>(attr);
      out->os() << "// meshfold-compile: gpu.binary @" << binary.getSymName()
                << "\n"
                << object.getObject().getValue();
      ++kernels;
    }
  if (kernels == 0)
    return fail("no kernels in '" + inputFile + "'");
  out->keep();
  stage("PTX written");
  return success();
}

/// --emit mlir / llvm: the lowered module or its optimised LLVM IR.
static LogicalResult writeIR(ModuleOp module, const CodegenOptions &cg,
                             StageTimer &stage) {
  stage.begin("writing");
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(outputFile, &error);
  if (!out)
    return fail(error);
  if (emit == Emit::MLIR)
    module.print(out->os());
  else if (failed(emitLLVMIR(module, out->os(), cg, error)))
    return fail(error);
  out->keep();
  stage("written");
  return success();
}

/// --emit obj: the object file, written beside the output and renamed, so
/// that a failure leaves no partial output.
static LogicalResult writeObject(ModuleOp module, const CodegenOptions &cg,
                                 StageTimer &stage) {
  stage.begin("emitting the object");
  std::string error;
  llvm::SmallString<256> tmp(outputFile);
  tmp += ".tmp";
  if (failed(emitObjectFile(module, tmp, cg, error))) {
    llvm::sys::fs::remove(tmp);
    return fail(error);
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, outputFile))
    return fail("cannot write '" + outputFile + "': " + ec.message());
  stage("object written");
  return success();
}

/// --emit exe: a temporary object linked with the runtime in `rtDir`.
static LogicalResult writeExecutable(ModuleOp module, const CodegenOptions &cg,
                                     llvm::StringRef rtDir, StageTimer &stage) {
  std::string error;
  llvm::SmallString<128> object;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("meshfold", "o", object))
    return fail("cannot create a temporary file: " + ec.message());
  llvm::FileRemover removeObject(object);
  stage.begin("emitting the object");
  if (failed(emitObjectFile(module, object, cg, error)))
    return fail(error);
  stage("object emitted");
  stage.begin("linking");

  if (target == "cuda") {
    CUDALinkOptions cuda;
    cuda.driverLibraryDir = MESHFOLD_CUDA_DRIVER_LIBRARY_DIR;
    cuda.ncclLibraryDir = MESHFOLD_NCCL_LIBRARY_DIR;
    cuda.cublasLt = gemmBackend == "cublaslt";
    cuda.cublasLtLibraryDir = MESHFOLD_CUBLASLT_LIBRARY_DIR;
    if (failed(linkCUDAExecutable(object, outputFile, rtDir, cuda, error)))
      return fail(error);
  } else if (failed(linkExecutable(object, outputFile, rtDir, error))) {
    return fail(error);
  }
  stage("linked");
  return success();
}

/// Writes what --emit asks for.
static LogicalResult writeOutput(ModuleOp module, llvm::StringRef rtDir,
                                 StageTimer &stage) {
  if (emit == Emit::PTX)
    return writePTX(module, stage);
  CodegenOptions cg;
  cg.optLevel = optLevel;
  cg.cpu = host.cpu;
  cg.features = host.features;
  if (emit == Emit::MLIR || emit == Emit::LLVM)
    return writeIR(module, cg, stage);
  if (emit == Emit::Obj)
    return writeObject(module, cg, stage);
  return writeExecutable(module, cg, rtDir, stage);
}

/// --decode-plan: the prefill pool's program (the plan flags', prefill
/// only) and the decode pool's (its own plan, the decode step only), each
/// partitioned and lowered, then one executable.
static LogicalResult compilePools(ModuleOp module, int64_t deviceBytes,
                                  llvm::StringRef rtDir, StageTimer &stage) {
  if (emit != Emit::Exe)
    return fail("--decode-plan writes an executable (--emit exe)");
  if (promptLogprobs)
    return fail("--decode-plan: --prompt-logprobs does not cover two pools "
                "yet");
  PlanFlags decodeFlags;
  PlanSpec decodeSpec;
  if (failed(decodePlanSpec(decodeFlags, decodeSpec)))
    return failure();
  OwningOpRef<ModuleOp> pool = module.clone();
  if (failed(setPlanFromFlags(module)) || failed(checkPlan(module)) ||
      failed(setPlan(*pool, decodeFlags)))
    return failure();
  FailureOr<std::string> error = mf::checkPlanAndModel(*pool);
  if (failed(error))
    return failure();
  if (!error->empty())
    return fail("--decode-plan: " + *error);
  PlanSpec prefillSpec = PlanSpec::singleDevice();
  if (auto plan =
          module->getAttrOfType<mf::PlanAttr>(mf::MFDialect::getPlanAttrName()))
    prefillSpec = plan.toPlanSpec();
  std::string why;
  std::optional<MeshLayout> prefillLayout =
      MeshLayout::create(prefillSpec, &why);
  std::optional<MeshLayout> decodeLayout = MeshLayout::create(decodeSpec, &why);
  if (!prefillLayout || !decodeLayout)
    return fail(why);
  if (std::string rule = checkPools(*prefillLayout, *decodeLayout);
      !rule.empty())
    return fail(rule);

  if (failed(partition(module, stage)))
    return failure();
  stage.begin("deriving the decode pool's step");
  PassManager pm(module.getContext());
  if (failed(applyPassManagerCLOptions(pm)))
    return fail("bad pass manager options");
  mf::MFDeriveDecodePassOptions derive;
  derive.keepEntry = false;
  pm.addPass(mf::createMFDeriveDecodePass(derive));
  if (failed(pm.run(*pool)))
    return failure();
  stage("decode step derived");
  if (failed(partition(*pool, stage)) ||
      failed(placementChecks(module, deviceBytes, "prefill")) ||
      failed(placementChecks(*pool, deviceBytes, "decode")))
    return failure();
  if (report == "memory" && failed(reportMemory(module, deviceBytes, *pool)))
    return failure();
  if (outputFile.empty())
    return success();
  stage.begin("lowering the prefill pool");
  if (failed(lower(module, stage)))
    return failure();
  stage.begin("lowering the decode pool");
  if (failed(lower(*pool, stage)))
    return failure();
  mergePool(module, *pool);
  return writeOutput(module, rtDir, stage);
}

/// Compiles the parsed `module`: the plan, --explain-order, partitioning,
/// --report memory, lowering and the output.
static LogicalResult compile(ModuleOp module, int64_t deviceBytes,
                             llvm::StringRef rtDir, StageTimer &stage) {
  if (suggestPlan)
    return suggestPlans(module, deviceBytes);
  if (!decodePlan.empty())
    return compilePools(module, deviceBytes, rtDir, stage);
  if (failed(setPlanFromFlags(module)) || failed(checkPlan(module)))
    return failure();
  if (explainOrder)
    return explainOrders(module);
  if (decodeStep) {
    stage.begin("deriving the decode step");
    PassManager pm(module.getContext());
    if (failed(applyPassManagerCLOptions(pm)))
      return fail("bad pass manager options");
    // Prefill keeps its own function: on a mesh its own partitioning
    // (zigzag chunks, ring attention, the last position's logits) beside
    // the step's (round-robin rows, pass-Q, the logits of the rows that
    // choose a token); on one device too, since prefill's head reads its
    // last row only.
    mf::MFDeriveDecodePassOptions derive;
    derive.keepEntry = true;
    pm.addPass(mf::createMFDeriveDecodePass(derive));
    if (failed(pm.run(module)))
      return failure();
    stage("decode step derived");
  }
  if (failed(partition(module, stage)) ||
      failed(placementChecks(module, deviceBytes)))
    return failure();
  if (report == "memory" && failed(reportMemory(module, deviceBytes)))
    return failure();
  if (outputFile.empty())
    return success();
  stage.begin("lowering");
  if (failed(lower(module, stage)))
    return failure();
  return writeOutput(module, rtDir, stage);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  parseCommandLine(argc, argv);
  int64_t deviceBytes = -1;
  if (failed(checkOutputFlags(deviceBytes)) || failed(checkTargetFlags()))
    return 1;
  std::string rtDir = findRuntimeDir(argv[0]);
  if (failed(checkRuntimeLibraries(rtDir)))
    return 1;

  std::unique_ptr<MLIRContext> context = createContext();
  StageTimer stage;
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, context.get());
  // A diagnostic first erases the progress line (then the handler above
  // prints it).
  context->getDiagEngine().registerHandler([](Diagnostic &) {
    clearProgress();
    return failure();
  });
  stage.begin("parsing");
  OwningOpRef<ModuleOp> module = parseInput(sourceMgr, *context);
  if (!module)
    return 1;
  stage("parsed");
  return failed(compile(*module, deviceBytes, rtDir, stage)) ? 1 : 0;
}
