//===- Compile.cpp - from LLVM dialect to an executable -------------------===//

#include "meshfold/Target/Compile.h"
#include "meshfold/Config.h"

#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/IPO/MergeFunctions.h"

#include <optional>

using namespace mlir;
using namespace meshfold;

namespace {

/// Translates and optimises; the module is owned by `llvmCtx`.
std::unique_ptr<llvm::Module>
translate(ModuleOp module, llvm::LLVMContext &llvmCtx, llvm::TargetMachine &tm,
          const CodegenOptions &options, std::string &error) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  // gpu.binary and gpu.launch_func of the CUDA target's host code.
  registerGPUDialectTranslation(registry);
  // The parallel loops of the CPU target (omp.parallel, omp.wsloop).
  registerOpenMPDialectTranslation(registry);
  module->getContext()->appendDialectRegistry(registry);
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmCtx);
  if (!llvmModule) {
    error = "translation to LLVM IR failed";
    return nullptr;
  }
  llvmModule->setTargetTriple(tm.getTargetTriple());
  llvmModule->setDataLayout(tm.createDataLayout());

  if (options.optLevel > 0) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(&tm);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::OptimizationLevel level =
        options.optLevel >= 3   ? llvm::OptimizationLevel::O3
        : options.optLevel == 2 ? llvm::OptimizationLevel::O2
                                : llvm::OptimizationLevel::O1;
    // The lowering emits each layer's kernels in place, so a stage of n
    // layers of one shape holds n identical copies of every outlined
    // parallel loop: merged first (the copies become calls to one), they
    // are optimised and compiled once.
    pb.registerPipelineStartEPCallback(
        [](llvm::ModulePassManager &mpm, llvm::OptimizationLevel) {
          mpm.addPass(llvm::MergeFunctionsPass());
        });
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(level);
    mpm.run(*llvmModule, mam);
  }
  return llvmModule;
}
} // namespace

std::unique_ptr<llvm::TargetMachine>
meshfold::createHostTargetMachine(const CodegenOptions &options,
                                  std::string &error) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // The contraction kernels' AVX transposes hold x86vector's inline-asm
  // blends, which the object writer parses.
  llvm::InitializeNativeTargetAsmParser();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  const std::string &cpu = options.cpu;
  llvm::CodeGenOptLevel level =
      options.optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
      : options.optLevel == 0 ? llvm::CodeGenOptLevel::None
                              : llvm::CodeGenOptLevel::Default;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu, options.features, llvm::TargetOptions(), llvm::Reloc::PIC_,
      std::nullopt, level));
  if (!tm)
    error = "cannot create a target machine for " + triple.str() + " / " + cpu;
  return tm;
}

FailureOr<HostTarget> meshfold::resolveHostTarget(llvm::StringRef cpu,
                                                  std::string &error) {
  llvm::InitializeNativeTarget();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return failure();
  HostTarget host;
  if (cpu == "native") {
    host.cpu = llvm::sys::getHostCPUName().str();
    llvm::SubtargetFeatures features;
    for (const llvm::StringMapEntry<bool> &f : llvm::sys::getHostCPUFeatures())
      features.AddFeature(f.first(), f.second);
    host.features = features.getString();
  } else {
    host.cpu = cpu.str();
  }
  // Checked against the target's table first: creating a subtarget for an
  // unknown name only warns and falls back to a generic CPU.
  std::unique_ptr<llvm::MCSubtargetInfo> generic(
      target->createMCSubtargetInfo(triple, "", ""));
  if (!generic || !generic->isCPUStringValid(host.cpu)) {
    error = "--cpu: '" + cpu.str() + "' is not a CPU of " + triple.str() +
            " (try native, x86-64, x86-64-v3 or x86-64-v4)";
    return failure();
  }
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, host.cpu, host.features));
  host.vectorBits = sti->checkFeatures("+avx512f") ? 512
                    : sti->checkFeatures("+avx")   ? 256
                                                   : 128;
  host.bf16Dot = host.vectorBits == 512 && sti->checkFeatures("+avx512bf16");
  return host;
}

LogicalResult meshfold::emitLLVMIR(ModuleOp module, llvm::raw_ostream &os,
                                   const CodegenOptions &options,
                                   std::string &error) {
  std::unique_ptr<llvm::TargetMachine> tm =
      createHostTargetMachine(options, error);
  if (!tm)
    return failure();
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      translate(module, llvmCtx, *tm, options, error);
  if (!llvmModule)
    return failure();
  llvmModule->print(os, nullptr);
  return success();
}

LogicalResult meshfold::emitObjectFile(ModuleOp module, llvm::StringRef path,
                                       const CodegenOptions &options,
                                       std::string &error) {
  std::unique_ptr<llvm::TargetMachine> tm =
      createHostTargetMachine(options, error);
  if (!tm)
    return failure();
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      translate(module, llvmCtx, *tm, options, error);
  if (!llvmModule)
    return failure();
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    error = "cannot write '" + path.str() + "': " + ec.message();
    return failure();
  }
  llvm::legacy::PassManager codegen;
  if (tm->addPassesToEmitFile(codegen, out, nullptr,
                              llvm::CodeGenFileType::ObjectFile)) {
    error = "the target cannot emit object files";
    return failure();
  }
  codegen.run(*llvmModule);
  out.flush();
  if (out.has_error()) {
    error = "error writing '" + path.str() + "'";
    out.clear_error();
    return failure();
  }
  return success();
}

namespace {
/// The runtime library `file` in `runtimeDir`, or nothing, with `error` one
/// line naming `what` is missing and `hint` (how to get it).
std::optional<std::string>
runtimeLibrary(llvm::StringRef runtimeDir, llvm::StringRef file,
               llvm::StringRef what, llvm::StringRef hint, std::string &error) {
  llvm::SmallString<256> path(runtimeDir);
  llvm::sys::path::append(path, file);
  if (llvm::sys::fs::exists(path))
    return std::string(path);
  error = (what + " not found: '" + path + "' (" + hint + ")").str();
  return std::nullopt;
}

/// libmfrt.a in `runtimeDir`, or nothing (with `error` set).
std::optional<std::string> coreRuntime(llvm::StringRef runtimeDir,
                                       std::string &error) {
  return runtimeLibrary(runtimeDir, "libmfrt.a", "runtime library",
                        "use --runtime-dir", error);
}

/// Links `object`, the runtime and `extraArgs` into `output`.
LogicalResult link(llvm::StringRef object, llvm::StringRef output,
                   llvm::StringRef runtimeDir,
                   llvm::ArrayRef<std::string> extraArgs, std::string &error) {
  std::optional<std::string> runtime = coreRuntime(runtimeDir, error);
  if (!runtime)
    return failure();
  std::string cxx = "c++";
  if (const char *env = std::getenv("CXX"))
    cxx = env;
  llvm::ErrorOr<std::string> linker = llvm::sys::findProgramByName(cxx);
  if (!linker) {
    error = "no C++ linker driver '" + cxx + "' on PATH (set CXX)";
    return failure();
  }
  // Link to a temporary name beside the output, then rename: no partial file.
  llvm::SmallString<256> tmp(output);
  tmp += ".link-tmp";
  std::string tmpStr(tmp);
  llvm::SmallVector<llvm::StringRef> args = {*linker, "-o", tmpStr, object,
                                             *runtime};
  for (const std::string &arg : extraArgs)
    args.push_back(arg);
  // LLVM's OpenMP runtime, named by its path and found at run time in its
  // own directory: the generated code's parallel loops call its __kmpc_*
  // entry points, the runtime its omp_set_num_threads (--threads), and
  // neither may resolve to another OpenMP library (GCC's libgomp, an older
  // libomp) that happens to be on the default paths.
  std::string ompRunPath =
      std::string("-Wl,-rpath,") + MESHFOLD_OMP_LIBRARY_DIR;
  args.append({MESHFOLD_OMP_LIBRARY, ompRunPath});
  // The tokenizers' libraries (text prompts).
  for (const char *flag : {MESHFOLD_TOKENIZER_LINK})
    args.push_back(flag);
  // The server's HTTP library (--serve).
  for (const char *flag : {MESHFOLD_SERVE_LINK})
    args.push_back(flag);
  args.append({"-lm", "-pthread"});
  // The linker's own messages go to a file; the first error line is quoted.
  llvm::SmallString<128> log;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("meshfold-link", "log", log)) {
    error = "cannot create a temporary file: " + ec.message();
    return failure();
  }
  llvm::FileRemover removeLog(log);
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(),
                                                log.str()};
  std::string errMsg;
  int rc = llvm::sys::ExecuteAndWait(*linker, args, std::nullopt, redirects, 0,
                                     0, &errMsg);
  if (rc != 0) {
    llvm::sys::fs::remove(tmp);
    std::string first;
    if (auto buf = llvm::MemoryBuffer::getFile(log)) {
      llvm::SmallVector<llvm::StringRef> lines;
      (*buf)->getBuffer().split(lines, '\n', -1, false);
      // An undefined symbol says more than the driver's summary line.
      for (llvm::StringRef key : {"undefined reference", "error"}) {
        for (llvm::StringRef line : lines)
          if (line.contains(key)) {
            first = line.trim().str();
            break;
          }
        if (!first.empty())
          break;
      }
      if (first.empty() && !lines.empty())
        first = lines.front().trim().str();
    }
    error = "linking failed (" + *linker + " exited with " +
            std::to_string(rc) + ")" + (first.empty() ? "" : ": " + first) +
            (errMsg.empty() ? "" : " " + errMsg);
    return failure();
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, output)) {
    llvm::sys::fs::remove(tmp);
    error = "cannot write '" + output.str() + "': " + ec.message();
    return failure();
  }
  return success();
}
} // namespace

LogicalResult meshfold::linkExecutable(llvm::StringRef object,
                                       llvm::StringRef output,
                                       llvm::StringRef runtimeDir,
                                       std::string &error) {
  return link(object, output, runtimeDir, {}, error);
}

LogicalResult meshfold::linkCUDAExecutable(llvm::StringRef object,
                                           llvm::StringRef output,
                                           llvm::StringRef runtimeDir,
                                           const CUDALinkOptions &cuda,
                                           std::string &error) {
  std::optional<std::string> mgpu =
      runtimeLibrary(runtimeDir, "libmfrt_cuda.a", "CUDA runtime library",
                     "build the mfrt_cuda target, or use --runtime-dir", error);
  if (!mgpu)
    return failure();
  if (cuda.driverLibraryDir.empty()) {
    error = "no CUDA driver library (libcuda.so) was found when meshfold was "
            "configured";
    return failure();
  }
  if (cuda.ncclLibraryDir.empty()) {
    error = "no NCCL library (libnccl.so) was found when meshfold was "
            "configured";
    return failure();
  }
  // cuBLASLt's products, whole: their definition, not libmfrt.a's weak one
  // (pulled in before them), is the program's.
  llvm::SmallVector<std::string> extra;
  if (cuda.cublasLt) {
    std::optional<std::string> lt = runtimeLibrary(
        runtimeDir, "libmfrt_cublaslt.a", "cuBLASLt runtime library",
        "build the mfrt_cublaslt target, or use --runtime-dir", error);
    if (!lt)
      return failure();
    extra = {"-Wl,--whole-archive",
             *lt,
             "-Wl,--no-whole-archive",
             "-L" + cuda.cublasLtLibraryDir,
             "-Wl,-rpath," + cuda.cublasLtLibraryDir,
             "-lcublasLt"};
  }
  // The mgpu* library and libmfrt.a may refer to each other: one group.
  // No run path to the driver: a stub must not shadow the real driver.
  std::optional<std::string> runtime = coreRuntime(runtimeDir, error);
  if (!runtime)
    return failure();
  extra.append({"-Wl,--start-group", *mgpu, *runtime, "-Wl,--end-group",
                "-L" + cuda.driverLibraryDir, "-lcuda",
                "-L" + cuda.ncclLibraryDir, "-Wl,-rpath," + cuda.ncclLibraryDir,
                "-lnccl", "-ldl"});
  return link(object, output, runtimeDir, extra, error);
}
