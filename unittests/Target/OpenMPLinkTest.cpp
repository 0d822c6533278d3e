//===- OpenMPLinkTest.cpp - Executables with OpenMP calls link and run ----===//
//
// The compile driver's link line (linkExecutable) links LLVM's OpenMP
// runtime: an object whose `prefill` forks an OpenMP parallel region, the way
// scf.parallel lowered to OpenMP does (__kmpc_fork_call), links with the
// runtime into an executable, and the region runs on the number of threads
// the program sets for its rank (--threads, or the default). The region
// counts its threads; `prefill` hands the count to the runtime as the one
// logit of a vocabulary of one, so that it comes back in the output file.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/Manifest.h"
#include "meshfold/Target/Compile.h"
#include "mfrt/io/Safetensors.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sched.h>

using namespace mlir;

namespace {
/// The program's manifest: no weights, no layers, a vocabulary of one;
/// `plan` empty for one rank.
std::string manifestText(const std::string &plan) {
  meshfold::Manifest m;
  m.entry = "prefill";
  m.hidden = 1;
  m.vocab = 1;
  m.heads = m.kvHeads = m.headDim = 1;
  m.experts = m.topK = m.ffn = 1;
  m.plan = plan;
  return meshfold::formatManifest(m);
}

/// `prefill` in the LLVM dialect: a parallel region that counts its threads
/// (what the OpenMP translation of omp.parallel calls), then the count as
/// rank 0's logit.
std::string programText(const std::string &manifest) {
  std::string escaped;
  for (char c : manifest) {
    if (c == '\n')
      escaped += "\\0A";
    else
      escaped += c;
  }
  std::string n = std::to_string(manifest.size() + 1);
  return R"mlir(
module {
  llvm.mlir.global external constant @__mf_manifest(")mlir" +
         escaped + R"mlir(\00") : !llvm.array<)mlir" + n +
         R"mlir( x i8>
  llvm.mlir.global internal constant @psource(";unknown;unknown;0;0;;\00") : !llvm.array<23 x i8>
  llvm.func @__kmpc_fork_call(!llvm.ptr, i32, !llvm.ptr, ...)
  llvm.func @mfrt_rank() -> i32
  llvm.func @_mlir_ciface_mfrt_logits_f32(!llvm.ptr, i64)

  llvm.func @count_threads(%gtid: !llvm.ptr, %btid: !llvm.ptr, %counter: !llvm.ptr) {
    %one = llvm.mlir.constant(1 : i32) : i32
    %old = llvm.atomicrmw add %counter, %one seq_cst : !llvm.ptr, i32
    llvm.return
  }

  llvm.func @_mlir_ciface_prefill(%tokens: !llvm.ptr) {
    %c0 = llvm.mlir.constant(0 : i64) : i64
    %c1 = llvm.mlir.constant(1 : i64) : i64
    %zero = llvm.mlir.constant(0 : i32) : i32
    %one = llvm.mlir.constant(1 : i32) : i32
    %counter = llvm.alloca %c1 x i32 : (i64) -> !llvm.ptr
    llvm.store %zero, %counter : i32, !llvm.ptr
    %src = llvm.mlir.addressof @psource : !llvm.ptr
    %z = llvm.mlir.zero : !llvm.struct<(i32, i32, i32, i32, ptr)>
    %identValue = llvm.insertvalue %src, %z[4] : !llvm.struct<(i32, i32, i32, i32, ptr)>
    %ident = llvm.alloca %c1 x !llvm.struct<(i32, i32, i32, i32, ptr)> : (i64) -> !llvm.ptr
    llvm.store %identValue, %ident : !llvm.struct<(i32, i32, i32, i32, ptr)>, !llvm.ptr
    %fn = llvm.mlir.addressof @count_threads : !llvm.ptr
    llvm.call @__kmpc_fork_call(%ident, %one, %fn, %counter) vararg(!llvm.func<void (ptr, i32, ptr, ...)>) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr) -> ()
    %count = llvm.load %counter : !llvm.ptr -> i32
    %value = llvm.sitofp %count : i32 to f32
    %buf = llvm.alloca %c1 x f32 : (i64) -> !llvm.ptr
    llvm.store %value, %buf : f32, !llvm.ptr
    %d0 = llvm.mlir.undef : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %d1 = llvm.insertvalue %buf, %d0[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %d2 = llvm.insertvalue %buf, %d1[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %d3 = llvm.insertvalue %c0, %d2[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %d4 = llvm.insertvalue %c1, %d3[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %d5 = llvm.insertvalue %c1, %d4[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %desc = llvm.alloca %c1 x !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> : (i64) -> !llvm.ptr
    llvm.store %d5, %desc : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>, !llvm.ptr
    %rank = llvm.call @mfrt_rank() : () -> i32
    %first = llvm.icmp "eq" %rank, %zero : i32
    %valid = llvm.zext %first : i1 to i64
    llvm.call @_mlir_ciface_mfrt_logits_f32(%desc, %valid) : (!llvm.ptr, i64) -> ()
    llvm.return
  }
}
)mlir";
}

class OpenMPLink : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("meshfold-omp", dir));
    weights = path("w.safetensors");
    prompts = path("prompts.txt");
    mfrt::SafetensorsWriter empty;
    std::string error;
    ASSERT_TRUE(empty.write(weights, &error)) << error;
    std::ofstream(prompts) << "0 0 0\n";
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(const char *name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  /// Compiles and links the program for `plan`; fails the test on error.
  void build(const std::string &plan, const std::string &exe) {
    MLIRContext ctx;
    ctx.loadDialect<LLVM::LLVMDialect>();
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(programText(manifestText(plan)), &ctx);
    ASSERT_TRUE(module);
    std::string object = path("prefill.o"), error;
    ASSERT_TRUE(succeeded(meshfold::emitObjectFile(
        *module, object, meshfold::CodegenOptions(), error)))
        << error;
    ASSERT_TRUE(succeeded(meshfold::linkExecutable(
        object, exe, MESHFOLD_TEST_RUNTIME_DIR, error)))
        << error;
  }

  /// Runs `exe` with `extra` flags; returns the threads rank 0's region ran
  /// on, or -1.
  int run(const std::string &exe, std::vector<std::string> extra) {
    std::string out = path("out.safetensors");
    std::vector<llvm::StringRef> args = {exe,         "--weights", weights,
                                         "--prompts", prompts,     "--out",
                                         out,         "--quiet"};
    for (const std::string &arg : extra)
      args.push_back(arg);
    std::string errMsg;
    int rc =
        llvm::sys::ExecuteAndWait(exe, args, std::nullopt, {}, 60, 0, &errMsg);
    EXPECT_EQ(rc, 0) << errMsg;
    std::string error;
    auto file = mfrt::SafetensorsFile::open(out, &error);
    if (!file)
      return -1;
    float count = -1;
    const mfrt::TensorInfo *logits = file->find("req0.logits");
    if (!logits || !mfrt::readAsF32(*logits, &count, 1, &error))
      return -1;
    llvm::sys::fs::remove(out);
    return int(count);
  }

  llvm::SmallString<128> dir;
  std::string weights, prompts;
};

TEST_F(OpenMPLink, ThreadsOfOneRank) {
  std::string exe = path("prefill");
  build("", exe);
  EXPECT_EQ(run(exe, {"--threads", "3"}), 3);
  EXPECT_EQ(run(exe, {"--threads=1"}), 1);
  // By default a one-rank run takes the cores it may run on.
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(run(exe, {}), CPU_COUNT(&set));
}

TEST_F(OpenMPLink, ThreadsOfLocalRanks) {
  // Two ranks, threads of one process: one OpenMP thread each by default,
  // --threads each otherwise.
  std::string exe = path("prefill2");
  build("devices=2 gpus_per_node=2 attention=tp:2,cp:1,dp:1,pp:1 "
        "experts=ep:2:tp+cp+dp,pp:1:pp",
        exe);
  EXPECT_EQ(run(exe, {}), 1);
  EXPECT_EQ(run(exe, {"--threads", "2"}), 2);
}
} // namespace
