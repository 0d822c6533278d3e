//===- Safetensors.cpp - Safetensors reader and writer --------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// No LLVM dependency: this file is linked into emitted executables.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Safetensors.h"
#include "meshfold/Support/DType.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors support assumes a little-endian host"
#endif

using namespace mfrt;
using namespace meshfold;

//===----------------------------------------------------------------------===//
// Element types and conversions
//===----------------------------------------------------------------------===//

const char *mfrt::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::F8_E4M3:
    return "F8_E4M3";
  }
  return "?";
}

size_t mfrt::dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::I64:
    return 8;
  case DType::F8_E4M3:
    return 1;
  }
  return 0;
}

bool mfrt::parseDType(const std::string &name, DType &dtype) {
  static const DType all[] = {DType::F32, DType::BF16, DType::F16,
                              DType::I64, DType::I32,  DType::F8_E4M3};
  for (DType candidate : all) {
    if (name == dtypeName(candidate)) {
      dtype = candidate;
      return true;
    }
  }
  return false;
}

std::string mfrt::formatShape(const std::vector<int64_t> &shape) {
  std::string result = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      result += ", ";
    result += std::to_string(shape[i]);
  }
  return result + "]";
}

int64_t TensorInfo::numElements() const {
  for (int64_t dim : shape)
    if (dim == 0)
      return 0; // Validated shapes can only overflow when a dimension is 0.
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

//===----------------------------------------------------------------------===//
// Parsing the header (nlohmann JSON)
//===----------------------------------------------------------------------===//

namespace {

/// The header's JSON, objects keeping their keys in file order (tensors are
/// listed, and the first bad one reported, in that order).
using Json = nlohmann::ordered_json;

/// The deepest nesting of arrays and objects a header may have.
constexpr int maxJsonDepth = 64;

/// What the parser callback throws to reject a header that is well-formed
/// JSON but not acceptable (a duplicate key, nesting too deep).
struct RejectedJson {
  size_t byte;
  std::string reason;
};

/// A `const char *` iterator that stores in `*read` the position just past
/// the last byte the parser has consumed, so that the parser callback can
/// name a header byte.
class TrackingIterator {
public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char *;
  using reference = const char &;

  TrackingIterator(const char *cur, const char **read) : cur(cur), read(read) {}
  reference operator*() const { return *cur; }
  TrackingIterator &operator++() {
    *read = ++cur;
    return *this;
  }
  bool operator==(const TrackingIterator &other) const {
    return cur == other.cur;
  }
  bool operator!=(const TrackingIterator &other) const {
    return cur != other.cur;
  }

private:
  const char *cur;
  const char **read;
};

/// Parses the \p size header bytes at \p data into \p header. Duplicate
/// object keys and nesting deeper than maxJsonDepth are errors. On failure
/// sets \p error to one line, "header is not valid JSON at header byte N:
/// <reason>", and returns false.
bool parseHeader(const char *data, size_t size, Json &header,
                 std::string &error) {
  const char *read = data;
  // The keys seen so far in each open object, innermost last.
  std::vector<std::set<std::string>> keys;
  Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event,
                                         Json &parsed) {
    size_t byte = static_cast<size_t>(read - data);
    switch (event) {
    case Json::parse_event_t::object_start:
    case Json::parse_event_t::array_start:
      if (depth >= maxJsonDepth)
        throw RejectedJson{byte, "nesting deeper than " +
                                     std::to_string(maxJsonDepth)};
      if (event == Json::parse_event_t::object_start)
        keys.emplace_back();
      break;
    case Json::parse_event_t::key:
      if (!keys.back().insert(parsed.get<std::string>()).second)
        throw RejectedJson{byte, "duplicate object key '" +
                                     parsed.get<std::string>() + "'"};
      break;
    case Json::parse_event_t::object_end:
      keys.pop_back();
      break;
    default:
      break;
    }
    return true;
  };
  // `taken` counts the bytes the parser has read, as nlohmann's error byte
  // does; the message names the offset (from 0) of the last one.
  auto fail = [&](size_t taken, const std::string &reason) {
    size_t byte = taken > 0 ? taken - 1 : 0;
    error = "header is not valid JSON at header byte " + std::to_string(byte) +
            ": " + reason;
    return false;
  };
  try {
    header = Json::parse(TrackingIterator(data, &read),
                         TrackingIterator(data + size, &read), callback,
                         /*allow_exceptions=*/true);
  } catch (const RejectedJson &rejected) {
    return fail(rejected.byte, rejected.reason);
  } catch (const Json::parse_error &e) {
    // e.what() is "[json.exception.parse_error.N] parse error at line L,
    // column C: <reason>".
    std::string reason = e.what();
    size_t colon = reason.find(": ");
    return fail(e.byte,
                colon == std::string::npos ? reason : reason.substr(colon + 2));
  } catch (const Json::exception &e) {
    std::string reason = e.what();
    size_t bracket = reason.find("] ");
    return fail(static_cast<size_t>(read - data),
                bracket == std::string::npos ? reason
                                             : reason.substr(bracket + 2));
  }
  return true;
}

/// How a JSON value reads as an int64.
enum class IntegerStatus { Ok, NotAnInteger, TooLarge };

/// Reads \p value into \p out if it is an integer that fits in an int64.
/// Integer literals beyond 64 bits are parsed as floats; a float of that
/// size counts as too large.
IntegerStatus readInteger(const Json &value, int64_t &out) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > uint64_t(INT64_MAX))
      return IntegerStatus::TooLarge;
    out = static_cast<int64_t>(value.get<uint64_t>());
    return IntegerStatus::Ok;
  }
  if (value.is_number_integer()) {
    out = value.get<int64_t>();
    return IntegerStatus::Ok;
  }
  if (value.is_number_float() && !(std::fabs(value.get<double>()) < 0x1p63))
    return IntegerStatus::TooLarge;
  return IntegerStatus::NotAnInteger;
}

/// Appends \p text to \p out as a JSON string literal; false if \p text is
/// not valid UTF-8.
bool appendQuoted(std::string &out, const std::string &text) {
  try {
    out += Json(text).dump();
    return true;
  } catch (const Json::exception &) {
    return false;
  }
}
} // namespace

//===----------------------------------------------------------------------===//
// SafetensorsFile
//===----------------------------------------------------------------------===//

/// Sets \p error (if non-null) to \p message, with control characters
/// (from escaped tensor names, say) written as \xNN so that it stays one
/// line. Returns false.
static bool setError(std::string *error, const std::string &message) {
  if (!error)
    return false;
  error->clear();
  for (char ch : message) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", c);
      *error += buffer;
    } else {
      *error += ch;
    }
  }
  return false;
}

/// Number of elements of \p shape, or -1 if it is negative or too large.
static int64_t checkedElements(const std::vector<int64_t> &shape) {
  uint64_t elements = 1;
  bool overflow = false, hasZero = false;
  for (int64_t dim : shape) {
    if (dim < 0)
      return -1;
    uint64_t d = static_cast<uint64_t>(dim);
    if (d == 0)
      hasZero = true;
    else if (elements > (uint64_t(INT64_MAX) / 16) / d)
      overflow = true;
    else
      elements *= d;
  }
  if (hasZero)
    return 0;
  if (overflow)
    return -1;
  return static_cast<int64_t>(elements);
}

static std::string formatRange(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

namespace {
/// Validates one header entry (a tensor) and fills \p info; \p dataSize is
/// the size of the data area.
class HeaderValidator {
public:
  HeaderValidator(const std::string &path, uint64_t dataSize)
      : path(path), dataSize(dataSize) {}

  bool fail(const std::string &what) {
    message = path + ": " + what;
    return false;
  }

  bool validateMetadata(const Json &value,
                        std::map<std::string, std::string> &metadata) {
    if (!value.is_object())
      return fail("__metadata__ is not an object");
    for (const auto &item : value.items()) {
      if (!item.value().is_string())
        return fail("__metadata__: value of '" + item.key() +
                    "' is not a string");
      metadata[item.key()] = item.value().get<std::string>();
    }
    return true;
  }

  bool validateTensor(const std::string &name, const Json &value,
                      TensorInfo &info) {
    std::string where = "tensor '" + name + "': ";
    if (name.empty())
      return fail("tensor with an empty name");
    if (!value.is_object())
      return fail(where + "entry is not an object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto &item : value.items()) {
      const std::string &key = item.key();
      if (key == "dtype")
        dtype = &item.value();
      else if (key == "shape")
        shape = &item.value();
      else if (key == "data_offsets")
        offsets = &item.value();
      else
        return fail(where + "unknown field '" + key + "'");
    }
    if (!dtype)
      return fail(where + "missing field 'dtype'");
    if (!shape)
      return fail(where + "missing field 'shape'");
    if (!offsets)
      return fail(where + "missing field 'data_offsets'");

    info.name = name;
    if (!dtype->is_string())
      return fail(where + "dtype is not a string");
    const std::string &dtypeText = dtype->get_ref<const std::string &>();
    if (!parseDType(dtypeText, info.dtype))
      return fail(where + "unsupported dtype '" + dtypeText +
                  "' (accepted: F32, BF16, F16, I64, I32, F8_E4M3)");

    if (!shape->is_array())
      return fail(where + "shape is not an array");
    for (const Json &dimValue : *shape) {
      int64_t dim = 0;
      IntegerStatus status = readInteger(dimValue, dim);
      if (status == IntegerStatus::TooLarge)
        return fail(where +
                    "shape has a dimension that does not fit in 64 bits");
      if (status != IntegerStatus::Ok)
        return fail(where + "shape contains a non-integer");
      if (dim < 0)
        return fail(where + "shape has a negative dimension " +
                    std::to_string(dim));
      info.shape.push_back(dim);
    }
    // A zero dimension makes the tensor empty, however large the others are.
    int64_t count = checkedElements(info.shape);
    if (count < 0)
      return fail(where + "shape " + formatShape(info.shape) + " is too large");
    uint64_t elements = static_cast<uint64_t>(count);

    if (!offsets->is_array() || offsets->size() != 2)
      return fail(where + "data_offsets is not an array of two integers");
    int64_t range[2];
    for (size_t i = 0; i < 2; ++i) {
      IntegerStatus status = readInteger((*offsets)[i], range[i]);
      if (status == IntegerStatus::TooLarge)
        return fail(where +
                    "data_offsets has an offset that does not fit in 64 bits");
      if (status != IntegerStatus::Ok)
        return fail(where + "data_offsets is not an array of two integers");
      if (range[i] < 0)
        return fail(where + "data_offsets has a negative offset " +
                    std::to_string(range[i]));
    }
    info.beginOffset = static_cast<uint64_t>(range[0]);
    info.endOffset = static_cast<uint64_t>(range[1]);
    std::string offsetText = formatRange(info.beginOffset, info.endOffset);
    if (info.beginOffset > info.endOffset)
      return fail(where + "data_offsets " + offsetText + " has begin > end");
    if (info.endOffset > dataSize)
      return fail(where + "data_offsets " + offsetText +
                  " run past the end of the data (" + std::to_string(dataSize) +
                  " bytes)");
    uint64_t needed = elements * dtypeSize(info.dtype);
    uint64_t held = info.endOffset - info.beginOffset;
    if (held != needed)
      return fail(where + "data_offsets " + offsetText + " hold " +
                  std::to_string(held) + " bytes, but shape " +
                  formatShape(info.shape) + " of " + dtypeName(info.dtype) +
                  " needs " + std::to_string(needed) + " bytes");
    info.byteSize = static_cast<size_t>(held);
    return true;
  }

  const std::string &error() const { return message; }

private:
  const std::string &path;
  uint64_t dataSize;
  std::string message;
};
} // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string &path,
                                                       std::string *error,
                                                       Mapping mapping) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    setError(error, path + ": cannot open: " + std::strerror(errno));
    return nullptr;
  }
  // The descriptor is kept until the file is mapped.
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->filePath = path;
  file->fd = fd;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    setError(error, path + ": cannot stat: " + std::strerror(errno));
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    setError(error, path + ": not a regular file");
    return nullptr;
  }
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  if (fileSize < 8) {
    setError(error, path + ": file is too short (" + std::to_string(fileSize) +
                        " bytes) to hold the 8-byte header length");
    return nullptr;
  }
  file->mappingSize = static_cast<size_t>(fileSize);
  // The header is read, not mapped: a shard is mapped only when one of its
  // tensors is wanted.
  auto readAt = [&](void *dst, size_t size, uint64_t offset) {
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pread(fd, static_cast<char *>(dst) + done, size - done,
                          off_t(offset + done));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      done += size_t(n);
    }
    return true;
  };
  uint8_t lengthBytes[8];
  if (!readAt(lengthBytes, 8, 0)) {
    setError(error, path + ": cannot read: " + std::strerror(errno));
    return nullptr;
  }
  uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i)
    headerSize = (headerSize << 8) | lengthBytes[i];
  if (headerSize > fileSize - 8) {
    setError(error, path + ": header length " + std::to_string(headerSize) +
                        " runs past the end of the file (" +
                        std::to_string(fileSize) + " bytes)");
    return nullptr;
  }
  uint64_t dataSize = fileSize - 8 - headerSize;
  file->dataStart = 8 + headerSize;
  std::string headerText(static_cast<size_t>(headerSize), '\0');
  if (!readAt(headerText.data(), headerText.size(), 8)) {
    setError(error, path + ": cannot read its header: " + std::strerror(errno));
    return nullptr;
  }

  Json header;
  std::string parseError;
  if (!parseHeader(headerText.data(), headerText.size(), header, parseError)) {
    setError(error, path + ": " + parseError);
    return nullptr;
  }
  if (!header.is_object()) {
    setError(error, path + ": header is not a JSON object");
    return nullptr;
  }

  HeaderValidator validator(path, dataSize);
  for (const auto &item : header.items()) {
    const std::string &key = item.key();
    if (key == "__metadata__") {
      if (!validator.validateMetadata(item.value(), file->metadataMap)) {
        setError(error, validator.error());
        return nullptr;
      }
      continue;
    }
    TensorInfo info;
    if (!validator.validateTensor(key, item.value(), info)) {
      setError(error, validator.error());
      return nullptr;
    }
    file->index[key] = file->tensorList.size();
    file->tensorList.push_back(std::move(info));
  }

  // Overlap check: sort the non-empty ranges by start.
  std::vector<const TensorInfo *> sorted;
  for (const TensorInfo &info : file->tensorList)
    if (info.byteSize != 0)
      sorted.push_back(&info);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorInfo *a, const TensorInfo *b) {
              if (a->beginOffset != b->beginOffset)
                return a->beginOffset < b->beginOffset;
              return a->endOffset < b->endOffset;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const TensorInfo *a = sorted[i - 1];
    const TensorInfo *b = sorted[i];
    if (a->endOffset > b->beginOffset) {
      setError(error, path + ": tensors '" + a->name + "' (data_offsets " +
                          formatRange(a->beginOffset, a->endOffset) +
                          ") and '" + b->name + "' (data_offsets " +
                          formatRange(b->beginOffset, b->endOffset) +
                          ") overlap");
      return nullptr;
    }
  }
  if (mapping == Mapping::Now && !file->map(error))
    return nullptr;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping)
    ::munmap(mapping, mappingSize);
  if (fd >= 0)
    ::close(fd);
}

bool SafetensorsFile::map(std::string *error) const {
  std::lock_guard<std::mutex> lock(mapMutex);
  if (mapping)
    return true;
  void *base = ::mmap(nullptr, mappingSize, PROT_READ, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED)
    return setError(error, filePath + ": cannot mmap: " + std::strerror(errno));
  const uint8_t *dataArea = static_cast<const uint8_t *>(base) + dataStart;
  for (TensorInfo &info : tensorList)
    info.data = dataArea + info.beginOffset;
  ::close(fd);
  fd = -1;
  mapping = base;
  return true;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> result;
  result.reserve(tensorList.size());
  for (const TensorInfo &info : tensorList)
    result.push_back(info.name);
  return result;
}

const TensorInfo *SafetensorsFile::find(const std::string &name) const {
  auto it = index.find(name);
  if (it == index.end())
    return nullptr;
  return &tensorList[it->second];
}

bool mfrt::readAsF32(const TensorInfo &tensor, float *dst, size_t count,
                     std::string *error) {
  size_t elements = static_cast<size_t>(tensor.numElements());
  if (count != elements)
    return setError(error, "tensor '" + tensor.name + "': has " +
                               std::to_string(elements) +
                               " elements but the destination holds " +
                               std::to_string(count));
  const uint8_t *src = tensor.data;
  switch (tensor.dtype) {
  case DType::F32:
    if (count)
      std::memcpy(dst, src, count * sizeof(float));
    return true;
  case DType::BF16:
    for (size_t i = 0; i < count; ++i)
      dst[i] =
          bf16ToF32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
    return true;
  case DType::F16:
    for (size_t i = 0; i < count; ++i)
      dst[i] =
          f16ToF32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
    return true;
  case DType::I64:
  case DType::I32:
  case DType::F8_E4M3: // Needs its block scales: not a plain read.
    break;
  }
  return setError(error, "tensor '" + tensor.name + "': dtype " +
                             dtypeName(tensor.dtype) +
                             " cannot be read as f32 (need F32, BF16 or F16)");
}

//===----------------------------------------------------------------------===//
// SafetensorsWriter
//===----------------------------------------------------------------------===//

void SafetensorsWriter::add(const std::string &name, DType dtype,
                            const std::vector<int64_t> &shape,
                            const void *data) {
  int64_t elements = checkedElements(shape);
  if (elements < 0) {
    if (pendingError.empty())
      pendingError =
          "tensor '" + name + "': invalid shape " + formatShape(shape);
    return;
  }
  size_t bytes = static_cast<size_t>(elements) * dtypeSize(dtype);
  std::vector<uint8_t> copy(bytes);
  if (bytes)
    std::memcpy(copy.data(), data, bytes);
  add(name, dtype, shape, std::move(copy));
}

void SafetensorsWriter::add(const std::string &name, DType dtype,
                            const std::vector<int64_t> &shape,
                            std::vector<uint8_t> bytes) {
  addEntry(name, dtype, shape, std::move(bytes), /*later=*/false);
}

void SafetensorsWriter::declare(const std::string &name, DType dtype,
                                const std::vector<int64_t> &shape) {
  addEntry(name, dtype, shape, {}, /*later=*/true);
}

void SafetensorsWriter::addEntry(const std::string &name, DType dtype,
                                 const std::vector<int64_t> &shape,
                                 std::vector<uint8_t> bytes, bool later) {
  std::string problem;
  int64_t elements = checkedElements(shape);
  if (name.empty())
    problem = "tensor with an empty name";
  else if (name == "__metadata__")
    problem = "tensor name '__metadata__' is reserved";
  else if (elements < 0)
    problem = "tensor '" + name + "': invalid shape " + formatShape(shape);
  else if (!later &&
           bytes.size() != static_cast<size_t>(elements) * dtypeSize(dtype))
    problem = "tensor '" + name + "': " + std::to_string(bytes.size()) +
              " bytes given, but shape " + formatShape(shape) + " of " +
              dtypeName(dtype) + " needs " +
              std::to_string(static_cast<size_t>(elements) * dtypeSize(dtype)) +
              " bytes";
  else
    for (const Entry &entry : entries)
      if (entry.name == name) {
        problem = "tensor '" + name + "' added twice";
        break;
      }
  if (!problem.empty()) {
    if (pendingError.empty())
      pendingError = problem;
    return;
  }
  entries.push_back(Entry{name, dtype, shape, std::move(bytes),
                          static_cast<size_t>(elements) * dtypeSize(dtype),
                          later});
}

void SafetensorsWriter::addF32(const std::string &name,
                               const std::vector<int64_t> &shape,
                               const std::vector<float> &values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!bytes.empty())
    std::memcpy(bytes.data(), values.data(), bytes.size());
  add(name, DType::F32, shape, std::move(bytes));
}

void SafetensorsWriter::setMetadata(const std::string &key,
                                    const std::string &value) {
  metadataMap[key] = value;
}

bool SafetensorsWriter::buildHeader(std::string &header,
                                    std::string *error) const {
  if (!pendingError.empty())
    return setError(error, pendingError);
  header = "{";
  bool first = true;
  if (!metadataMap.empty()) {
    header += "\"__metadata__\":{";
    bool firstEntry = true;
    for (const auto &kv : metadataMap) {
      if (!firstEntry)
        header += ",";
      firstEntry = false;
      if (!appendQuoted(header, kv.first))
        return setError(error, "__metadata__ key '" + kv.first +
                                   "' is not valid UTF-8");
      header += ":";
      if (!appendQuoted(header, kv.second))
        return setError(error, "__metadata__: value of '" + kv.first +
                                   "' is not valid UTF-8");
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const Entry &entry : entries) {
    if (!first)
      header += ",";
    first = false;
    if (!appendQuoted(header, entry.name))
      return setError(error,
                      "tensor '" + entry.name + "': name is not valid UTF-8");
    header += std::string(":{\"dtype\":\"") + dtypeName(entry.dtype) +
              "\",\"shape\":[";
    for (size_t i = 0; i < entry.shape.size(); ++i) {
      if (i)
        header += ",";
      header += std::to_string(entry.shape[i]);
    }
    uint64_t end = offset + entry.byteCount;
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  // Pad so that the data area (8 + header) starts at a multiple of 8.
  while (header.size() % 8 != 0)
    header += ' ';
  return true;
}

bool SafetensorsWriter::write(const std::string &path, std::string *error,
                              const Producer &produce) const {
  std::string header;
  if (!buildHeader(header, error)) {
    if (error)
      *error = path + ": " + *error;
    return false;
  }
  std::string tmpPath = path + ".tmp";
  std::FILE *out = std::fopen(tmpPath.c_str(), "wb");
  if (!out)
    return setError(error,
                    tmpPath + ": cannot create: " + std::strerror(errno));

  auto failWrite = [&](const char *what) {
    std::string reason = std::strerror(errno);
    if (out)
      std::fclose(out);
    std::remove(tmpPath.c_str());
    return setError(error, tmpPath + ": " + what + ": " + reason);
  };

  uint8_t lengthBytes[8];
  uint64_t headerSize = header.size();
  for (int i = 0; i < 8; ++i)
    lengthBytes[i] = static_cast<uint8_t>(headerSize >> (8 * i));
  if (std::fwrite(lengthBytes, 1, 8, out) != 8 ||
      std::fwrite(header.data(), 1, header.size(), out) != header.size())
    return failWrite("write failed");
  std::vector<uint8_t> produced;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry &entry = entries[i];
    const std::vector<uint8_t> *bytes = &entry.bytes;
    if (entry.later) {
      produced.clear();
      if (!produce || !produce(i, produced) ||
          produced.size() != entry.byteCount) {
        std::fclose(out);
        std::remove(tmpPath.c_str());
        return setError(error, path + ": tensor '" + entry.name +
                                   "': its bytes were not produced (" +
                                   std::to_string(produced.size()) + " of " +
                                   std::to_string(entry.byteCount) + ")");
      }
      bytes = &produced;
    }
    if (!bytes->empty() &&
        std::fwrite(bytes->data(), 1, bytes->size(), out) != bytes->size())
      return failWrite("write failed");
  }
  if (std::fflush(out) != 0)
    return failWrite("write failed");
  if (::fsync(fileno(out)) != 0 && errno != EINVAL)
    return failWrite("fsync failed");
  int closeResult = std::fclose(out);
  out = nullptr;
  if (closeResult != 0)
    return failWrite("close failed");
  if (std::rename(tmpPath.c_str(), path.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::remove(tmpPath.c_str());
    return setError(error, path + ": cannot rename " + tmpPath + ": " + reason);
  }
  return true;
}
