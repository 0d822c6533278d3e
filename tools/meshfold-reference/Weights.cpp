//===- Weights.cpp - The reference's weights, checked and loaded ----------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Weights by HF name from a checkpoint, converted to f32: F32, BF16 and F16
// through mfrt_io, fp8 e4m3 matrices dequantized here with their 128 x 128
// block scales.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include <cmath>
#include <limits>

using namespace meshfold::reference;

/// fp8 e4m3 ("e4m3fn") by its definition: (-1)^s 2^(e-7) (1 + m/8), or
/// m 2^-9 when e = 0; S.1111.111 is NaN.
static float decodeE4M3(uint8_t code) {
  int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7)
    return std::numeric_limits<float>::quiet_NaN();
  double magnitude =
      e == 0 ? std::ldexp(double(m), -9) : std::ldexp(8.0 + m, e - 10);
  return static_cast<float>((code & 0x80) ? -magnitude : magnitude);
}

bool Weights::check(const std::string &name,
                    const std::vector<int64_t> &shape) {
  const mfrt::TensorInfo *tensor = file.find(name);
  if (!tensor)
    return fail(failure,
                file.fileOf(name) + ": tensor '" + name + "' is missing");
  if (tensor->dtype != mfrt::DType::F32 && tensor->dtype != mfrt::DType::BF16 &&
      tensor->dtype != mfrt::DType::F16 &&
      tensor->dtype != mfrt::DType::F8_E4M3)
    return fail(failure, file.fileOf(name) + ": tensor '" + name +
                             "' has dtype " + mfrt::dtypeName(tensor->dtype) +
                             ", expected F32, BF16, F16 or F8_E4M3");
  if (tensor->shape != shape)
    return fail(failure, file.fileOf(name) + ": tensor '" + name +
                             "' has shape " + mfrt::formatShape(tensor->shape) +
                             ", expected " + mfrt::formatShape(shape) +
                             " from the config");
  if (tensor->dtype != mfrt::DType::F8_E4M3)
    return true;
  if (shape.size() != 2)
    return fail(failure, file.fileOf(name) + ": tensor '" + name +
                             "' is F8_E4M3 but not a matrix");
  return checkScales(name, shape);
}

bool Weights::checkScales(const std::string &name,
                          const std::vector<int64_t> &shape) {
  const std::string scaleName = name + "_scale_inv";
  const mfrt::TensorInfo *scales = file.find(scaleName);
  std::vector<int64_t> scaleShape = {(shape[0] + 127) / 128,
                                     (shape[1] + 127) / 128};
  if (!scales)
    return fail(failure, file.fileOf(name) + ": tensor '" + name +
                             "' is F8_E4M3 but '" + scaleName + "' is missing");
  if (scales->dtype != mfrt::DType::F32 && scales->dtype != mfrt::DType::BF16 &&
      scales->dtype != mfrt::DType::F16)
    return fail(failure, file.fileOf(scaleName) + ": tensor '" + scaleName +
                             "' has dtype " + mfrt::dtypeName(scales->dtype) +
                             ", expected F32, BF16 or F16");
  if (scales->shape != scaleShape)
    return fail(failure, file.fileOf(scaleName) + ": tensor '" + scaleName +
                             "' has shape " + mfrt::formatShape(scales->shape) +
                             ", expected " + mfrt::formatShape(scaleShape) +
                             " (128 x 128 blocks)");
  return true;
}

bool Weights::load(const std::string &name, std::vector<float> &out) {
  const mfrt::TensorInfo *tensor = file.find(name);
  if (!tensor)
    return fail(failure,
                file.fileOf(name) + ": tensor '" + name + "' is missing");
  out.assign(static_cast<size_t>(tensor->numElements()), 0.0f);
  if (tensor->dtype == mfrt::DType::F8_E4M3)
    return loadF8(*tensor, 0, tensor->shape[0], out.data());
  std::string error;
  if (!mfrt::readAsF32(*tensor, out.data(), out.size(), &error))
    return fail(failure, file.fileOf(name) + ": " + error);
  return true;
}

bool Weights::loadRow(const std::string &name, int64_t row, float *out) {
  const mfrt::TensorInfo *tensor = file.find(name);
  if (!tensor || tensor->shape.size() != 2)
    return fail(failure, file.fileOf(name) + ": tensor '" + name +
                             "' is missing or not 2-D");
  if (tensor->dtype == mfrt::DType::F8_E4M3)
    return loadF8(*tensor, row, 1, out);
  int64_t cols = tensor->shape[1];
  mfrt::TensorInfo rowInfo = *tensor;
  rowInfo.shape = {cols};
  rowInfo.data = tensor->data + static_cast<size_t>(row) *
                                    static_cast<size_t>(cols) *
                                    mfrt::dtypeSize(tensor->dtype);
  rowInfo.byteSize = static_cast<size_t>(cols) * mfrt::dtypeSize(tensor->dtype);
  std::string error;
  if (!mfrt::readAsF32(rowInfo, out, static_cast<size_t>(cols), &error))
    return fail(failure, file.fileOf(name) + ": " + error);
  return true;
}

bool Weights::loadF8(const mfrt::TensorInfo &tensor, int64_t first,
                     int64_t rows, float *out) {
  std::vector<float> scales;
  if (!load(tensor.name + "_scale_inv", scales))
    return false;
  int64_t cols = tensor.shape[1], scaleCols = (cols + 127) / 128;
  for (int64_t r = first; r < first + rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      *out++ = decodeE4M3(tensor.data[r * cols + c]) *
               scales[static_cast<size_t>((r / 128) * scaleCols + c / 128)];
  return true;
}

std::string meshfold::reference::layerName(int64_t layer,
                                           const std::string &suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::string meshfold::reference::expertName(const Config &c, int64_t layer,
                                            int64_t expert, const char *which) {
  return layerName(layer, c.moeBlock + ".experts." + std::to_string(expert) +
                              "." + which + ".weight");
}

std::string meshfold::reference::sharedName(const Config &c, int64_t layer,
                                            const char *which) {
  return layerName(layer,
                   c.moeBlock + "." + c.sharedBlock + "." + which + ".weight");
}

std::string meshfold::reference::attnName(int64_t layer, const char *which) {
  return layerName(layer, std::string("self_attn.") + which + ".weight");
}
