//===- Safetensors.h - Safetensors reader and writer ------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// A strict reader and writer for the safetensors format:
///
///   [u64 little-endian header length N][N bytes of JSON header][data area]
///
/// The header is a JSON object mapping tensor names to
/// `{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}` (offsets
/// relative to the start of the data area), plus an optional `__metadata__`
/// object of string to string.
///
/// The header is parsed, and its strings quoted, with the header-only
/// nlohmann JSON library; duplicate object keys and nesting deeper than 64
/// are rejected. This file has no LLVM dependency: it is linked into emitted
/// executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_SAFETENSORS_H
#define MFRT_IO_SAFETENSORS_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfrt {

/// Element types accepted in safetensors files. F8_E4M3 is fp8 e4m3fn, the
/// storage of block-quantized weights (each with its `weight_scale_inv`).
enum class DType { F32, BF16, F16, I64, I32, F8_E4M3 };

/// The safetensors spelling of \p dtype ("F32", "BF16", ...).
const char *dtypeName(DType dtype);

/// Size in bytes of one element of \p dtype.
size_t dtypeSize(DType dtype);

/// Parses a safetensors dtype spelling; returns false if it is not one of the
/// accepted dtypes.
bool parseDType(const std::string &name, DType &dtype);

/// Formats a shape as "[2, 3]".
std::string formatShape(const std::vector<int64_t> &shape);

/// One tensor of an open safetensors file.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Start of the tensor's bytes inside the memory-mapped file. Not
  /// necessarily aligned for the element type: copy with memcpy.
  const uint8_t *data = nullptr;
  /// Number of bytes: numElements() * dtypeSize(dtype).
  size_t byteSize = 0;
  /// The header's data_offsets, relative to the start of the data area.
  uint64_t beginOffset = 0;
  uint64_t endOffset = 0;

  /// Product of the shape (1 for a scalar).
  int64_t numElements() const;
};

/// A read-only, memory-mapped safetensors file whose header has been fully
/// validated: every tensor has an accepted dtype, a non-negative shape, a byte
/// range inside the data area whose size matches the shape, and no two
/// tensors' ranges overlap.
class SafetensorsFile {
public:
  /// When the file's bytes are mapped: at open, or on the first map().
  enum class Mapping { Now, Lazy };

  /// Reads and validates the header of \p path (and maps the file, with
  /// Mapping::Now). On failure returns null and sets \p error (if non-null)
  /// to one line naming the file and the offending tensor or field. Until
  /// the file is mapped, every tensor's `data` is null.
  static std::unique_ptr<SafetensorsFile> open(const std::string &path,
                                               std::string *error,
                                               Mapping mapping = Mapping::Now);

  /// Maps the file (once; thread-safe) and sets every tensor's `data`.
  bool map(std::string *error) const;
  /// Whether the file is mapped, and its size in bytes.
  bool isMapped() const {
    std::lock_guard<std::mutex> lock(mapMutex);
    return mapping != nullptr;
  }
  size_t size() const { return mappingSize; }

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;

  /// The path the file was opened with.
  const std::string &path() const { return filePath; }

  /// Tensor names in header order.
  std::vector<std::string> names() const;

  /// All tensors in header order.
  const std::vector<TensorInfo> &tensors() const { return tensorList; }

  /// The tensor called \p name, or null.
  const TensorInfo *find(const std::string &name) const;

  /// The `__metadata__` map (empty if absent).
  const std::map<std::string, std::string> &metadata() const {
    return metadataMap;
  }

private:
  SafetensorsFile() = default;

  std::string filePath;
  /// Set by map(): the mapping, and the tensors' `data`.
  mutable std::mutex mapMutex;
  mutable void *mapping = nullptr;
  mutable int fd = -1;
  size_t mappingSize = 0;
  uint64_t dataStart = 0;
  mutable std::vector<TensorInfo> tensorList;
  std::unordered_map<std::string, size_t> index;
  std::map<std::string, std::string> metadataMap;
};

/// Converts the F32, BF16 or F16 tensor \p tensor to f32 into \p dst, which
/// holds \p count floats; \p count must equal tensor.numElements(). On failure
/// (other dtype, wrong count) returns false and sets \p error (if non-null)
/// to one line naming the tensor.
bool readAsF32(const TensorInfo &tensor, float *dst, size_t count,
               std::string *error);

/// Builds a safetensors file in memory and writes it atomically.
///
/// Tensors are laid out in insertion order; the header is padded with spaces
/// so that the data area starts at a multiple of 8 bytes. Problems found by
/// add() (duplicate names, byte counts that do not match the shape, bad
/// names) are reported by write().
class SafetensorsWriter {
public:
  /// Adds a tensor, copying numElements(shape) * dtypeSize(dtype) bytes from
  /// \p data.
  void add(const std::string &name, DType dtype,
           const std::vector<int64_t> &shape, const void *data);

  /// Adds a tensor whose bytes are \p bytes; their size must match the shape.
  void add(const std::string &name, DType dtype,
           const std::vector<int64_t> &shape, std::vector<uint8_t> bytes);

  /// Adds an F32 tensor from \p values (size must match the shape).
  void addF32(const std::string &name, const std::vector<int64_t> &shape,
              const std::vector<float> &values);

  /// Sets one `__metadata__` entry (replacing an earlier value).
  void setMetadata(const std::string &key, const std::string &value);

  /// Number of tensors added so far.
  size_t size() const { return entries.size(); }

  /// Adds a tensor whose bytes write() asks \p produce for, in order, when
  /// it writes them (so that a large file is never held whole).
  void declare(const std::string &name, DType dtype,
               const std::vector<int64_t> &shape);

  /// Fills `bytes` with declared tensor `index`'s bytes; false on failure.
  using Producer =
      std::function<bool(size_t index, std::vector<uint8_t> &bytes)>;

  /// Writes the file to `path.tmp` and renames it to \p path, so that a
  /// partial output file never exists under \p path. On failure returns
  /// false, removes the temporary file, and sets \p error (if non-null).
  /// Declared tensors' bytes come from \p produce.
  bool write(const std::string &path, std::string *error,
             const Producer &produce = {}) const;

  /// The serialized header (JSON plus space padding), as write() emits it.
  /// Returns false and sets \p error on the same problems as write().
  bool buildHeader(std::string &header, std::string *error) const;

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    /// The tensor's size; its bytes come from write()'s producer (later).
    size_t byteCount = 0;
    bool later = false;
  };
  void addEntry(const std::string &name, DType dtype,
                const std::vector<int64_t> &shape, std::vector<uint8_t> bytes,
                bool later);
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadataMap;
  /// First problem found by add(); reported by write().
  std::string pendingError;
};

} // namespace mfrt

#endif // MFRT_IO_SAFETENSORS_H
