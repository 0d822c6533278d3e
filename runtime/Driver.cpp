//===- Driver.cpp - the emitted executable's main and runtime hooks -------===//
//
// Every executable meshfold emits links this file: it parses the command
// line, checks the weights file against the embedded manifest, loads the
// weights, reads the prompts, runs the compiled `prefill` entry once per
// request, and writes the outputs (last-token logits and the KV cache).
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"
#include "Prompts.h"
#include "Safetensors.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

using namespace mfrt;

extern "C" {
/// The manifest the compiler embeds.
extern const char __mf_manifest[];
/// The compiled entry point (C interface of `func.func @prefill`).
void _mlir_ciface_prefill(StridedMemRefType<int64_t, 1> *tokens);
}

namespace {
const char *gProgram = "prefill";

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "%s: error: %s\n", gProgram, msg.c_str());
  std::exit(1);
}

std::string shapeStr(const std::vector<int64_t> &shape) {
  return formatShape(shape);
}

struct Runtime {
  Manifest manifest;
  /// Weights by manifest id, as f32.
  std::vector<std::vector<float>> params;
  /// The request being run: its length and K/V buffers per layer
  /// ([T, n_kv, d_h] each) with a mark per written position.
  int64_t tokens = 0;
  std::vector<std::vector<float>> keys, values;
  std::vector<std::vector<uint8_t>> written;
  std::vector<float> logits;
  bool haveLogits = false;
};
Runtime gRuntime;

std::string replaceAll(std::string s, const std::string &from,
                       const std::string &to) {
  for (size_t pos = s.find(from); pos != std::string::npos;
       pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

/// Reads one tensor, checking its presence, dtype and shape.
void loadTensor(const SafetensorsFile &file, const std::string &name,
                const std::vector<int64_t> &shape, float *dst) {
  const TensorInfo *t = file.find(name);
  if (!t)
    die(file.path() + ": weight '" + name + "' is missing (expected shape " +
        shapeStr(shape) + ")");
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 &&
      t->dtype != DType::F16)
    die(file.path() + ": weight '" + name + "' has dtype " +
        dtypeName(t->dtype) + ", expected F32, BF16 or F16");
  if (t->shape != shape)
    die(file.path() + ": weight '" + name + "' has shape " +
        shapeStr(t->shape) + ", the model expects " + shapeStr(shape) +
        " (a weights file for a different model?)");
  std::string error;
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  if (!readAsF32(*t, dst, size_t(count), &error))
    die(error);
}

void loadWeights(const std::string &path) {
  std::string error;
  std::unique_ptr<SafetensorsFile> file = SafetensorsFile::open(path, &error);
  if (!file)
    die(error);
  Runtime &rt = gRuntime;
  rt.params.resize(rt.manifest.params.size());
  for (const ManifestParam &p : rt.manifest.params) {
    int64_t count = 1;
    for (int64_t d : p.shape)
      count *= d;
    std::vector<float> &buf = rt.params[p.id];
    buf.resize(size_t(count));
    if (!p.isStacked()) {
      loadTensor(*file, p.name, p.shape, buf.data());
      continue;
    }
    std::vector<int64_t> one(p.shape.begin() + 1, p.shape.end());
    int64_t per = count / p.shape[0];
    for (int64_t e = 0; e < p.shape[0]; ++e)
      loadTensor(*file, replaceAll(p.name, "{e}", std::to_string(e)), one,
                 buf.data() + e * per);
  }
}

void usage() {
  std::printf(
      "usage: %s --weights W.safetensors --prompts PROMPTS.txt --out "
      "OUT.safetensors [--quiet]\n\n"
      "Runs prefill for every prompt (one request per line, token ids "
      "separated by spaces)\nand writes, per request r, req{r}.logits [V] "
      "(last prompt position) and\nreq{r}.layers.{i}.k / .v [T, n_kv, d_h] "
      "(K after RoPE), all f32.\n\n"
      "  --weights FILE   safetensors with Hugging Face Mixtral names (F32, "
      "BF16 or F16)\n"
      "  --prompts FILE   prompts, one request per line\n"
      "  --out FILE       output safetensors (written only on success)\n"
      "  --quiet          print nothing but errors\n"
      "  --help           this text\n",
      gProgram);
}
} // namespace

extern "C" {
/// The data of weight `id` of the manifest (f32, row-major, full shape).
/// The runtime owns it; the program only reads it.
void *mfrt_weight(int64_t id) {
  Runtime &rt = gRuntime;
  if (id < 0 || size_t(id) >= rt.params.size())
    die("internal: weight id " + std::to_string(id) + " out of range");
  return rt.params[id].data();
}

/// K/V cache entries of `layer` for the tokens at `positions`, KV heads
/// `headOffset ..` of the model's; positions past the prompt (padding) are
/// dropped.
void _mlir_ciface_mfrt_kv_cache_f32(int64_t layer,
                                    StridedMemRefType<float, 3> *k,
                                    StridedMemRefType<float, 3> *v,
                                    StridedMemRefType<int64_t, 1> *positions,
                                    int64_t headOffset) {
  Runtime &rt = gRuntime;
  const Manifest &m = rt.manifest;
  if (layer < 0 || layer >= m.layers)
    die("internal: K/V for layer " + std::to_string(layer) +
        " outside the model's " + std::to_string(m.layers) + " layers");
  int64_t heads = k->sizes[1];
  if (k->sizes[2] != m.headDim || v->sizes[0] != k->sizes[0] ||
      v->sizes[1] != heads || v->sizes[2] != m.headDim ||
      positions->sizes[0] != k->sizes[0] || headOffset < 0 ||
      headOffset + heads > m.kvHeads)
    die("internal: K/V entries of layer " + std::to_string(layer) +
        " have an unexpected shape");
  int64_t row = m.kvHeads * m.headDim;
  for (int64_t t = 0; t < k->sizes[0]; ++t) {
    int64_t pos =
        positions->data[positions->offset + t * positions->strides[0]];
    if (pos < 0)
      die("internal: negative K/V position " + std::to_string(pos));
    if (pos >= rt.tokens)
      continue; // padding
    rt.written[layer][pos] = 1;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < m.headDim; ++d) {
        int64_t kIdx = k->offset + t * k->strides[0] + h * k->strides[1] +
                       d * k->strides[2];
        int64_t vIdx = v->offset + t * v->strides[0] + h * v->strides[1] +
                       d * v->strides[2];
        int64_t at = pos * row + (headOffset + h) * m.headDim + d;
        rt.keys[layer][at] = k->data[kIdx];
        rt.values[layer][at] = v->data[vIdx];
      }
  }
}

/// The request's last-token logits, recorded when `valid` is non-zero.
void _mlir_ciface_mfrt_logits_f32(StridedMemRefType<float, 1> *logits,
                                  int64_t valid) {
  Runtime &rt = gRuntime;
  if (!valid)
    return;
  if (logits->sizes[0] != rt.manifest.vocab)
    die("internal: logits have " + std::to_string(logits->sizes[0]) +
        " entries, expected " + std::to_string(rt.manifest.vocab));
  rt.logits.resize(size_t(rt.manifest.vocab));
  for (int64_t i = 0; i < rt.manifest.vocab; ++i)
    rt.logits[i] = logits->data[logits->offset + i * logits->strides[0]];
  rt.haveLogits = true;
}
} // extern "C"

int main(int argc, char **argv) {
  if (argc > 0 && argv[0]) {
    const char *slash = std::strrchr(argv[0], '/');
    gProgram = slash ? slash + 1 : argv[0];
  }
  std::string weights, prompts, out;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &dst) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        dst = arg.substr(eq + 1);
        return;
      }
      if (i + 1 >= argc)
        die("option '" + arg + "' needs a value");
      dst = argv[++i];
    };
    std::string name = arg.substr(0, arg.find('='));
    if (name == "--help" || name == "-h") {
      usage();
      return 0;
    }
    if (name == "--weights")
      value(weights);
    else if (name == "--prompts")
      value(prompts);
    else if (name == "--out")
      value(out);
    else if (name == "--quiet")
      quiet = true;
    else
      die("unknown option '" + arg + "' (see --help)");
  }
  for (auto [flag, value] : {std::pair<const char *, std::string *>{
                                 "--weights", &weights},
                             {"--prompts", &prompts},
                             {"--out", &out}})
    if (value->empty())
      die(std::string("missing ") + flag + " (see --help)");
  // Fail before the work, not after it, when the output cannot be written.
  {
    std::string dir = out.find('/') == std::string::npos
                          ? std::string(".")
                          : out.substr(0, out.rfind('/') + 1);
    if (access(dir.c_str(), W_OK) != 0)
      die("--out " + out + ": directory '" + dir + "' is not writable (" +
          std::strerror(errno) + ")");
  }

  Runtime &rt = gRuntime;
  std::string error;
  if (!parseManifest(__mf_manifest, rt.manifest, error))
    die(error);
  const Manifest &m = rt.manifest;

  std::vector<std::vector<int64_t>> requests;
  if (!parsePrompts(prompts, m.vocab, requests, &error))
    die(error);
  auto t0 = std::chrono::steady_clock::now();
  loadWeights(weights);

  SafetensorsWriter writer;
  writer.setMetadata("format", "meshfold-prefill-output");
  for (size_t r = 0; r < requests.size(); ++r) {
    std::vector<int64_t> &toks = requests[r];
    int64_t t = int64_t(toks.size());
    int64_t row = m.kvHeads * m.headDim;
    rt.tokens = t;
    rt.keys.assign(m.layers, std::vector<float>(size_t(t * row)));
    rt.values.assign(m.layers, std::vector<float>(size_t(t * row)));
    rt.written.assign(m.layers, std::vector<uint8_t>(size_t(t), 0));

    StridedMemRefType<int64_t, 1> in;
    in.basePtr = in.data = toks.data();
    in.offset = 0;
    in.sizes[0] = t;
    in.strides[0] = 1;
    rt.haveLogits = false;
    _mlir_ciface_prefill(&in);
    if (!rt.haveLogits)
      die("internal: the program produced no logits for request " +
          std::to_string(r));
    const std::vector<float> &lg = rt.logits;

    for (int64_t l = 0; l < m.layers; ++l)
      for (int64_t p = 0; p < t; ++p)
        if (!rt.written[l][p])
          die("internal: no K/V for layer " + std::to_string(l) + " position " +
              std::to_string(p));
    std::string prefix = "req" + std::to_string(r);
    writer.addF32(prefix + ".logits", {m.vocab}, lg);
    for (int64_t l = 0; l < m.layers; ++l) {
      std::string layer = prefix + ".layers." + std::to_string(l);
      writer.addF32(layer + ".k", {t, m.kvHeads, m.headDim}, rt.keys[l]);
      writer.addF32(layer + ".v", {t, m.kvHeads, m.headDim}, rt.values[l]);
    }
    if (!quiet) {
      int64_t best = 0;
      for (int64_t i = 1; i < m.vocab; ++i)
        if (lg[i] > lg[best])
          best = i;
      std::printf("req %zu: %lld tokens -> next token %lld (logit %.4f)\n", r,
                  (long long)t, (long long)best, lg[best]);
    }
  }
  if (!writer.write(out, &error))
    die(error);
  if (!quiet) {
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf("wrote %s: %zu requests, %lld layers (%.3f s)\n", out.c_str(),
                requests.size(), (long long)m.layers, s);
  }
  return 0;
}
