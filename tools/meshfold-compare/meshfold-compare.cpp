//===- meshfold-compare.cpp - Compare two safetensors files ---------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Compares every tensor of A against the tensor of the same name in B (B is
// the reference). Both files must hold the same tensor names with the same
// shapes. Per tensor the error is
//
//   max_i |a_i - b_i| / max(max_i |b_i|, tiny)
//
// i.e. relative to the largest magnitude of that tensor in B, not per element.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Version.h"
#include "mfrt/io/Checkpoint.h"
#include "mfrt/io/Safetensors.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace llvm;

static cl::OptionCategory category("meshfold-compare options");

static cl::opt<std::string>
    pathA(cl::Positional, cl::Required,
          cl::desc("<A: a safetensors file, an index or a folder>"),
          cl::cat(category));
static cl::opt<std::string> pathB(cl::Positional, cl::Required,
                                  cl::desc("<B (the reference), the same>"),
                                  cl::cat(category));
static cl::opt<double>
    relTol("rtol",
           cl::desc("Largest allowed relative error per tensor: "
                    "max|a-b| / max|b| over the whole tensor (default 1e-4)"),
           cl::init(1e-4), cl::cat(category));
static cl::opt<double>
    absTol("atol",
           cl::desc("A tensor whose max|a-b| is at most this passes whatever "
                    "its relative error (default 1e-6)"),
           cl::init(1e-6), cl::cat(category));
static cl::opt<bool> verbose("v", cl::desc("Print every tensor's error"),
                             cl::cat(category));

namespace {

/// Reads any supported dtype as double.
bool readAsDouble(const mfrt::TensorInfo &tensor, std::vector<double> &out,
                  std::string &error) {
  size_t count = static_cast<size_t>(tensor.numElements());
  out.resize(count);
  switch (tensor.dtype) {
  case mfrt::DType::I64:
    for (size_t i = 0; i < count; ++i) {
      int64_t v;
      std::memcpy(&v, tensor.data + 8 * i, 8);
      out[i] = static_cast<double>(v);
    }
    return true;
  case mfrt::DType::I32:
    for (size_t i = 0; i < count; ++i) {
      int32_t v;
      std::memcpy(&v, tensor.data + 4 * i, 4);
      out[i] = static_cast<double>(v);
    }
    return true;
  default: {
    std::vector<float> f(count);
    if (!mfrt::readAsF32(tensor, f.data(), count, &error))
      return false;
    for (size_t i = 0; i < count; ++i)
      out[i] = f[i];
    return true;
  }
  }
}

/// The kind of a tensor: its name with layer and request indices replaced by
/// '*' ("req3.layers.7.k" -> "req*.layers.*.k").
std::string tensorKind(const std::string &name) {
  std::string kind;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    std::string part = name.substr(
        start, dot == std::string::npos ? std::string::npos : dot - start);
    bool allDigits = !part.empty() &&
                     part.find_first_not_of("0123456789") == std::string::npos;
    if (allDigits)
      part = "*";
    else if (part.size() > 3 && part.compare(0, 3, "req") == 0 &&
             part.find_first_not_of("0123456789", 3) == std::string::npos)
      part = "req*";
    if (start != 0)
      kind += ".";
    kind += part;
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return kind;
}

/// Formats flat index \p index of \p shape as "[i, j, k]".
std::string formatIndex(const std::vector<int64_t> &shape, int64_t index) {
  std::vector<int64_t> coords(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    coords[i] = shape[i] ? index % shape[i] : 0;
    index = shape[i] ? index / shape[i] : 0;
  }
  return mfrt::formatShape(coords);
}

std::string sci(double value) {
  std::string s;
  raw_string_ostream os(s);
  os << format("%.2e", value);
  return s;
}

struct TensorResult {
  std::string name;
  double relError = 0;
  double maxAbsError = 0;
  double maxAbsB = 0;
  int64_t worst = -1;
  double worstA = 0, worstB = 0;
  bool pass = true;
  /// Passed only because max|a-b| <= atol (its relative error is over rtol).
  bool withinAtolOnly = false;
};

struct KindSummary {
  int count = 0;
  int failures = 0;
  int withinAtolOnly = 0;
  double maxRelError = 0;
  std::string worstTensor;
};

TensorResult compareTensor(const mfrt::TensorInfo &a,
                           const std::vector<double> &va,
                           const std::vector<double> &vb) {
  TensorResult result;
  result.name = a.name;
  bool nonFinite = false;
  for (size_t i = 0; i < va.size(); ++i) {
    double diff = std::fabs(va[i] - vb[i]);
    if (std::isfinite(vb[i]))
      result.maxAbsB = std::max(result.maxAbsB, std::fabs(vb[i]));
    if (!std::isfinite(va[i]) || !std::isfinite(vb[i])) {
      if (!nonFinite) {
        nonFinite = true;
        result.worst = static_cast<int64_t>(i);
        result.worstA = va[i];
        result.worstB = vb[i];
      }
      continue;
    }
    if (!nonFinite && (diff > result.maxAbsError || result.worst < 0)) {
      result.maxAbsError = diff;
      result.worst = static_cast<int64_t>(i);
      result.worstA = va[i];
      result.worstB = vb[i];
    }
  }
  if (nonFinite) {
    result.maxAbsError = INFINITY;
    result.relError = INFINITY;
    result.pass = false;
    return result;
  }
  result.relError = result.maxAbsError /
                    std::max(result.maxAbsB, static_cast<double>(FLT_MIN));
  result.pass = result.maxAbsError <= absTol || result.relError <= relTol;
  result.withinAtolOnly = result.pass && result.relError > relTol;
  return result;
}

int run() {
  std::string error;
  std::unique_ptr<mfrt::Checkpoint> a = mfrt::Checkpoint::open(pathA, &error);
  if (!a) {
    errs() << "meshfold-compare: error: " << error << "\n";
    return 1;
  }
  std::unique_ptr<mfrt::Checkpoint> b = mfrt::Checkpoint::open(pathB, &error);
  if (!b || !a->mapAll(&error) || !b->mapAll(&error)) {
    errs() << "meshfold-compare: error: " << error << "\n";
    return 1;
  }

  int structural = 0; // Missing tensors and shape mismatches.
  for (const mfrt::TensorInfo *tb : b->tensors())
    if (!a->find(tb->name)) {
      outs() << "missing in A (" << pathA << "): " << tb->name << "\n";
      ++structural;
    }

  std::vector<std::string> kindOrder;
  std::map<std::string, KindSummary> kinds;
  std::vector<TensorResult> failures;
  int compared = 0;
  int withinAtolOnly = 0;
  TensorResult overall;
  overall.relError = -1;
  std::vector<double> va, vb;
  for (const mfrt::TensorInfo *pa : a->tensors()) {
    const mfrt::TensorInfo &ta = *pa;
    const mfrt::TensorInfo *tb = b->find(ta.name);
    if (!tb) {
      outs() << "missing in B (" << pathB << "): " << ta.name << "\n";
      ++structural;
      continue;
    }
    if (ta.shape != tb->shape) {
      outs() << "shape mismatch: " << ta.name << ": A "
             << mfrt::formatShape(ta.shape) << " vs B "
             << mfrt::formatShape(tb->shape) << "\n";
      ++structural;
      continue;
    }
    if (!readAsDouble(ta, va, error) || !readAsDouble(*tb, vb, error)) {
      errs() << "meshfold-compare: error: " << error << "\n";
      return 1;
    }
    TensorResult result = compareTensor(ta, va, vb);
    ++compared;
    std::string kind = tensorKind(ta.name);
    auto inserted = kinds.insert({kind, KindSummary()});
    if (inserted.second)
      kindOrder.push_back(kind);
    KindSummary &summary = inserted.first->second;
    ++summary.count;
    // Tensors that pass only through atol (near-zero tensors) are counted
    // apart, so that their large relative error does not mask the others.
    if (result.withinAtolOnly) {
      ++summary.withinAtolOnly;
      ++withinAtolOnly;
    } else {
      if (summary.worstTensor.empty() ||
          result.relError > summary.maxRelError) {
        summary.maxRelError = result.relError;
        summary.worstTensor = ta.name;
      }
      if (result.relError > overall.relError)
        overall = result;
    }
    if (!result.pass) {
      ++summary.failures;
      failures.push_back(result);
    }
    if (verbose)
      outs() << "  " << ta.name << " " << mfrt::formatShape(ta.shape)
             << ": max rel err " << sci(result.relError) << " (max abs err "
             << sci(result.maxAbsError) << ", max |b| " << sci(result.maxAbsB)
             << ")"
             << (result.pass ? (result.withinAtolOnly ? " within atol" : "")
                             : " FAIL")
             << "\n";
  }

  outs() << "tensor kind summary (error per tensor: max|a-b| / max|b|):\n";
  for (const std::string &kind : kindOrder) {
    const KindSummary &s = kinds[kind];
    outs() << "  " << left_justify(kind, 32) << " " << format("%5d", s.count)
           << " tensors, max rel err " << sci(s.maxRelError) << " ("
           << (s.worstTensor.empty() ? std::string("none") : s.worstTensor)
           << ")";
    if (s.withinAtolOnly)
      outs() << ", " << s.withinAtolOnly << " within atol only";
    if (s.failures)
      outs() << ", " << s.failures << " over tolerance";
    outs() << "\n";
  }
  for (const TensorResult &f : failures) {
    const mfrt::TensorInfo *t = a->find(f.name);
    outs() << "FAIL " << f.name << ": max rel err " << sci(f.relError)
           << " > rtol " << sci(relTol) << " (max abs err "
           << sci(f.maxAbsError) << " > atol " << sci(absTol) << ", max |b| "
           << sci(f.maxAbsB) << ") at " << formatIndex(t->shape, f.worst)
           << " (flat " << f.worst << "): a = " << format("%.9g", f.worstA)
           << ", b = " << format("%.9g", f.worstB) << "\n";
  }

  bool pass = failures.empty() && structural == 0;
  outs() << "compare: " << compared << " tensors, max rel err "
         << sci(std::max(overall.relError, 0.0)) << " ("
         << (overall.name.empty() ? std::string("none") : overall.name) << "), "
         << (pass ? "PASS" : "FAIL");
  if (!pass) {
    outs() << " (" << failures.size() << " over tolerance";
    if (structural)
      outs() << ", " << structural << " missing or mismatched";
    outs() << ")";
  } else if (withinAtolOnly) {
    outs() << " (" << withinAtolOnly << " within atol only)";
  }
  outs() << "\n";
  return pass ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "compare two safetensors files or checkpoints (an index or a folder of\n"
      "shards; B is the reference)\n\n"
      "  Every tensor of A must be in B with the same shape, and vice versa.\n"
      "  Per tensor, the error is max|a-b| / max(max|b|, tiny): relative to\n"
      "  the largest magnitude of that tensor in B, not element by element.\n"
      "  A tensor passes if that error is <= --rtol or max|a-b| <= --atol;\n"
      "  NaN or inf anywhere fails. Exits 1 if any tensor fails or a tensor\n"
      "  is missing or has a different shape.\n");
  if (!(relTol >= 0) || !(absTol >= 0)) {
    errs() << "meshfold-compare: error: --rtol and --atol must be "
              "non-negative\n";
    return 1;
  }
  return run();
}
