//===- CodegenABITest.cpp - The runtime defines every codegen entry point -===//
//
// CodegenABI.def declares every function generated code calls; the runtime's
// definitions are compiled against mfrt/CodegenABI.h, so their signatures
// match it. This test takes the address of each one: it links only if the
// runtime defines them all, with the names the conversions emit.
//
//===----------------------------------------------------------------------===//

#include "mfrt/CodegenABI.h"

#include "gtest/gtest.h"

#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {
struct Entry {
  const char *name;
  const char *symbol;
  const void *address;
};

const std::vector<Entry> &entries() {
  static const std::vector<Entry> all = {
#define MFRT_CODEGEN_MEMREF(Name, Signature)                                   \
  {#Name, "_mlir_ciface_" #Name,                                               \
   reinterpret_cast<const void *>(&_mlir_ciface_##Name)},
#define MFRT_CODEGEN_LLVM(Name, Signature)                                     \
  {#Name, #Name, reinterpret_cast<const void *>(&Name)},
#include "mfrt/CodegenABI.def"
  };
  return all;
}
} // namespace

TEST(CodegenABI, EveryEntryPointIsDefined) {
  ASSERT_FALSE(entries().empty());
  std::set<std::string> names;
  for (const Entry &e : entries()) {
    EXPECT_NE(e.address, nullptr) << e.symbol;
    EXPECT_TRUE(names.insert(e.name).second) << "declared twice: " << e.name;
    EXPECT_EQ(std::string(e.name).rfind("mfrt_", 0), 0u)
        << e.name << ": runtime entry points start with mfrt_";
  }
}

TEST(CodegenABI, SignaturesAreTheDeclarations) {
  // The C types the generated code passes, for two entry points of each
  // kind; a definition with other types would not compile (CodegenABI.h).
  static_assert(std::is_same_v<mfrt::abi::mfrt_weight_type, void *(int64_t)>);
  static_assert(std::is_same_v<mfrt::abi::mfrt_cg_all_gather_f32_type,
                               void(int64_t, UnrankedMemRefType<float> *,
                                    UnrankedMemRefType<float> *)>);
  static_assert(std::is_same_v<mfrt::abi::mfrt_kv_cache_f32_type,
                               void(int64_t, StridedMemRefType<float, 3> *,
                                    StridedMemRefType<float, 3> *,
                                    StridedMemRefType<int64_t, 1> *, int64_t)>);
  SUCCEED();
}
