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
#include <limits>

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
  }
  return 0;
}

bool mfrt::parseDType(const std::string &name, DType &dtype) {
  static const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::I64,
                              DType::I32};
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
// A small strict JSON parser (objects, arrays, strings, integers)
//===----------------------------------------------------------------------===//

namespace {

struct JsonValue {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Integer;
  int64_t integer = 0;
  std::string string;
  /// Array elements, or object values (parallel to `keys`).
  std::vector<JsonValue> items;
  /// Object keys in document order.
  std::vector<std::string> keys;
};

/// Parses one JSON document made of objects, arrays, strings and integers.
/// Anything else (floats, true/false/null, trailing commas, duplicate keys,
/// unescaped control characters, trailing garbage) is an error.
class JsonParser {
public:
  JsonParser(const char *data, size_t size)
      : start(data), cur(data), end(data + size) {}

  bool parseDocument(JsonValue &out) {
    skipWhitespace();
    if (!parseValue(out, 0))
      return false;
    skipWhitespace();
    if (cur != end)
      return fail("unexpected trailing characters after the JSON value");
    return true;
  }

  const std::string &error() const { return message; }

private:
  static constexpr int maxDepth = 64;

  bool fail(const std::string &what) {
    message = "at header byte " + std::to_string(cur - start) + ": " + what;
    return false;
  }

  void skipWhitespace() {
    while (cur != end &&
           (*cur == ' ' || *cur == '\t' || *cur == '\n' || *cur == '\r'))
      ++cur;
  }

  bool parseValue(JsonValue &out, int depth) {
    if (depth > maxDepth)
      return fail("nesting is too deep");
    if (cur == end)
      return fail("unexpected end of header, expected a value");
    char c = *cur;
    if (c == '{')
      return parseObject(out, depth);
    if (c == '[')
      return parseArray(out, depth);
    if (c == '"') {
      out.kind = JsonValue::Kind::String;
      return parseString(out.string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      out.kind = JsonValue::Kind::Integer;
      return parseInteger(out.integer);
    }
    return fail(std::string("unexpected character '") + printable(c) +
                "', expected a string, an integer, an array or an object");
  }

  static std::string printable(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f)
      return std::string(1, c);
    char buffer[8];
    std::snprintf(buffer, sizeof(buffer), "\\x%02x", u);
    return buffer;
  }

  bool parseObject(JsonValue &out, int depth) {
    out.kind = JsonValue::Kind::Object;
    ++cur; // '{'
    skipWhitespace();
    if (cur != end && *cur == '}') {
      ++cur;
      return true;
    }
    while (true) {
      skipWhitespace();
      if (cur == end || *cur != '"')
        return fail("expected a string object key");
      std::string key;
      if (!parseString(key))
        return false;
      for (const std::string &existing : out.keys)
        if (existing == key)
          return fail("duplicate object key '" + key + "'");
      skipWhitespace();
      if (cur == end || *cur != ':')
        return fail("expected ':' after object key '" + key + "'");
      ++cur;
      skipWhitespace();
      JsonValue value;
      if (!parseValue(value, depth + 1))
        return false;
      out.keys.push_back(std::move(key));
      out.items.push_back(std::move(value));
      skipWhitespace();
      if (cur == end)
        return fail("unexpected end of header inside an object");
      if (*cur == ',') {
        ++cur;
        continue;
      }
      if (*cur == '}') {
        ++cur;
        return true;
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  bool parseArray(JsonValue &out, int depth) {
    out.kind = JsonValue::Kind::Array;
    ++cur; // '['
    skipWhitespace();
    if (cur != end && *cur == ']') {
      ++cur;
      return true;
    }
    while (true) {
      skipWhitespace();
      JsonValue value;
      if (!parseValue(value, depth + 1))
        return false;
      out.items.push_back(std::move(value));
      skipWhitespace();
      if (cur == end)
        return fail("unexpected end of header inside an array");
      if (*cur == ',') {
        ++cur;
        continue;
      }
      if (*cur == ']') {
        ++cur;
        return true;
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  bool parseHex4(uint32_t &code) {
    if (end - cur < 4)
      return fail("truncated \\u escape");
    code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = cur[i];
      uint32_t digit;
      if (c >= '0' && c <= '9')
        digit = c - '0';
      else if (c >= 'a' && c <= 'f')
        digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        digit = c - 'A' + 10;
      else
        return fail("invalid hex digit in \\u escape");
      code = code * 16 + digit;
    }
    cur += 4;
    return true;
  }

  static void appendUtf8(std::string &out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  bool parseString(std::string &out) {
    ++cur; // '"'
    out.clear();
    while (true) {
      if (cur == end)
        return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(*cur);
      if (c == '"') {
        ++cur;
        return true;
      }
      if (c < 0x20)
        return fail("unescaped control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++cur;
        continue;
      }
      ++cur;
      if (cur == end)
        return fail("unterminated escape in a string");
      char e = *cur++;
      switch (e) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t code = 0;
        if (!parseHex4(code))
          return false;
        if (code >= 0xdc00 && code <= 0xdfff)
          return fail("unpaired low surrogate in \\u escape");
        if (code >= 0xd800 && code <= 0xdbff) {
          if (end - cur < 2 || cur[0] != '\\' || cur[1] != 'u')
            return fail("unpaired high surrogate in \\u escape");
          cur += 2;
          uint32_t low = 0;
          if (!parseHex4(low))
            return false;
          if (low < 0xdc00 || low > 0xdfff)
            return fail("invalid low surrogate in \\u escape");
          code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        }
        appendUtf8(out, code);
        break;
      }
      default:
        --cur;
        return fail(std::string("invalid escape '\\") + printable(e) +
                    "' in a string");
      }
    }
  }

  bool parseInteger(int64_t &out) {
    bool negative = false;
    if (*cur == '-') {
      negative = true;
      ++cur;
    }
    if (cur == end || *cur < '0' || *cur > '9')
      return fail("expected a digit");
    if (*cur == '0' && cur + 1 != end && cur[1] >= '0' && cur[1] <= '9')
      return fail("leading zeros are not allowed in numbers");
    // Accumulate the magnitude; allow up to 2^63 for the negative case.
    uint64_t magnitude = 0;
    const uint64_t limit = negative ? uint64_t(1) << 63 : uint64_t(INT64_MAX);
    while (cur != end && *cur >= '0' && *cur <= '9') {
      uint64_t digit = static_cast<uint64_t>(*cur - '0');
      if (magnitude > (limit - digit) / 10)
        return fail("integer does not fit in 64 bits");
      magnitude = magnitude * 10 + digit;
      ++cur;
    }
    if (cur != end && (*cur == '.' || *cur == 'e' || *cur == 'E'))
      return fail("only integers are allowed, not floating-point numbers");
    if (negative)
      out = magnitude == (uint64_t(1) << 63) ? INT64_MIN
                                             : -static_cast<int64_t>(magnitude);
    else
      out = static_cast<int64_t>(magnitude);
    return true;
  }

  const char *start;
  const char *cur;
  const char *end;
  std::string message;
};

/// Escapes \p text as a JSON string literal (with quotes).
std::string jsonQuote(const std::string &text) {
  std::string out = "\"";
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20) {
        char buffer[8];
        std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
        out += buffer;
      } else {
        out += ch;
      }
    }
  }
  return out + "\"";
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

  bool validateMetadata(const JsonValue &value,
                        std::map<std::string, std::string> &metadata) {
    if (value.kind != JsonValue::Kind::Object)
      return fail("__metadata__ is not an object");
    for (size_t i = 0; i < value.keys.size(); ++i) {
      if (value.items[i].kind != JsonValue::Kind::String)
        return fail("__metadata__: value of '" + value.keys[i] +
                    "' is not a string");
      metadata[value.keys[i]] = value.items[i].string;
    }
    return true;
  }

  bool validateTensor(const std::string &name, const JsonValue &value,
                      TensorInfo &info) {
    std::string where = "tensor '" + name + "': ";
    if (name.empty())
      return fail("tensor with an empty name");
    if (value.kind != JsonValue::Kind::Object)
      return fail(where + "entry is not an object");
    const JsonValue *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (size_t i = 0; i < value.keys.size(); ++i) {
      const std::string &key = value.keys[i];
      if (key == "dtype")
        dtype = &value.items[i];
      else if (key == "shape")
        shape = &value.items[i];
      else if (key == "data_offsets")
        offsets = &value.items[i];
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
    if (dtype->kind != JsonValue::Kind::String)
      return fail(where + "dtype is not a string");
    if (!parseDType(dtype->string, info.dtype))
      return fail(where + "unsupported dtype '" + dtype->string +
                  "' (accepted: F32, BF16, F16, I64, I32)");

    if (shape->kind != JsonValue::Kind::Array)
      return fail(where + "shape is not an array");
    uint64_t elements = 1;
    bool overflow = false, hasZero = false;
    for (const JsonValue &dim : shape->items) {
      if (dim.kind != JsonValue::Kind::Integer)
        return fail(where + "shape contains a non-integer");
      if (dim.integer < 0)
        return fail(where + "shape has a negative dimension " +
                    std::to_string(dim.integer));
      info.shape.push_back(dim.integer);
      uint64_t d = static_cast<uint64_t>(dim.integer);
      if (d == 0)
        hasZero = true;
      else if (elements > (uint64_t(INT64_MAX) / 16) / d)
        overflow = true;
      else
        elements *= d;
    }
    // A zero dimension makes the tensor empty, however large the others are.
    if (hasZero)
      elements = 0;
    else if (overflow)
      return fail(where + "shape " + formatShape(info.shape) + " is too large");

    if (offsets->kind != JsonValue::Kind::Array || offsets->items.size() != 2)
      return fail(where + "data_offsets is not an array of two integers");
    for (const JsonValue &offset : offsets->items) {
      if (offset.kind != JsonValue::Kind::Integer)
        return fail(where + "data_offsets is not an array of two integers");
      if (offset.integer < 0)
        return fail(where + "data_offsets has a negative offset " +
                    std::to_string(offset.integer));
    }
    info.beginOffset = static_cast<uint64_t>(offsets->items[0].integer);
    info.endOffset = static_cast<uint64_t>(offsets->items[1].integer);
    std::string range = formatRange(info.beginOffset, info.endOffset);
    if (info.beginOffset > info.endOffset)
      return fail(where + "data_offsets " + range + " has begin > end");
    if (info.endOffset > dataSize)
      return fail(where + "data_offsets " + range +
                  " run past the end of the data (" + std::to_string(dataSize) +
                  " bytes)");
    uint64_t needed = elements * dtypeSize(info.dtype);
    uint64_t held = info.endOffset - info.beginOffset;
    if (held != needed)
      return fail(where + "data_offsets " + range + " hold " +
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
                                                       std::string *error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    setError(error, path + ": cannot open: " + std::strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    setError(error, path + ": cannot stat: " + std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    setError(error, path + ": not a regular file");
    ::close(fd);
    return nullptr;
  }
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  if (fileSize < 8) {
    setError(error, path + ": file is too short (" + std::to_string(fileSize) +
                        " bytes) to hold the 8-byte header length");
    ::close(fd);
    return nullptr;
  }
  void *mapping = ::mmap(nullptr, static_cast<size_t>(fileSize), PROT_READ,
                         MAP_PRIVATE, fd, 0);
  int mmapErrno = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) {
    setError(error, path + ": cannot mmap: " + std::strerror(mmapErrno));
    return nullptr;
  }

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->filePath = path;
  file->mapping = mapping;
  file->mappingSize = static_cast<size_t>(fileSize);
  const uint8_t *bytes = static_cast<const uint8_t *>(mapping);

  uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i)
    headerSize = (headerSize << 8) | bytes[i];
  if (headerSize > fileSize - 8) {
    setError(error, path + ": header length " + std::to_string(headerSize) +
                        " runs past the end of the file (" +
                        std::to_string(fileSize) + " bytes)");
    return nullptr;
  }
  uint64_t dataSize = fileSize - 8 - headerSize;
  const uint8_t *dataArea = bytes + 8 + headerSize;

  JsonValue header;
  JsonParser parser(reinterpret_cast<const char *>(bytes + 8),
                    static_cast<size_t>(headerSize));
  if (!parser.parseDocument(header)) {
    setError(error, path + ": header is not valid JSON: " + parser.error());
    return nullptr;
  }
  if (header.kind != JsonValue::Kind::Object) {
    setError(error, path + ": header is not a JSON object");
    return nullptr;
  }

  HeaderValidator validator(path, dataSize);
  for (size_t i = 0; i < header.keys.size(); ++i) {
    const std::string &key = header.keys[i];
    if (key == "__metadata__") {
      if (!validator.validateMetadata(header.items[i], file->metadataMap)) {
        setError(error, validator.error());
        return nullptr;
      }
      continue;
    }
    TensorInfo info;
    if (!validator.validateTensor(key, header.items[i], info)) {
      setError(error, validator.error());
      return nullptr;
    }
    info.data = dataArea + info.beginOffset;
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
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping)
    ::munmap(mapping, mappingSize);
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
    break;
  }
  return setError(error, "tensor '" + tensor.name + "': dtype " +
                             dtypeName(tensor.dtype) +
                             " cannot be read as f32 (need F32, BF16 or F16)");
}

//===----------------------------------------------------------------------===//
// SafetensorsWriter
//===----------------------------------------------------------------------===//

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
  std::string problem;
  int64_t elements = checkedElements(shape);
  if (name.empty())
    problem = "tensor with an empty name";
  else if (name == "__metadata__")
    problem = "tensor name '__metadata__' is reserved";
  else if (elements < 0)
    problem = "tensor '" + name + "': invalid shape " + formatShape(shape);
  else if (bytes.size() != static_cast<size_t>(elements) * dtypeSize(dtype))
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
  entries.push_back(Entry{name, dtype, shape, std::move(bytes)});
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
      header += jsonQuote(kv.first) + ":" + jsonQuote(kv.second);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const Entry &entry : entries) {
    if (!first)
      header += ",";
    first = false;
    header += jsonQuote(entry.name) + ":{\"dtype\":\"" +
              dtypeName(entry.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < entry.shape.size(); ++i) {
      if (i)
        header += ",";
      header += std::to_string(entry.shape[i]);
    }
    uint64_t end = offset + entry.bytes.size();
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

bool SafetensorsWriter::write(const std::string &path,
                              std::string *error) const {
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
  for (const Entry &entry : entries)
    if (!entry.bytes.empty() &&
        std::fwrite(entry.bytes.data(), 1, entry.bytes.size(), out) !=
            entry.bytes.size())
      return failWrite("write failed");
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
