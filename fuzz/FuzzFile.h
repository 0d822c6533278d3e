//===- FuzzFile.h - Fuzz inputs for readers that take a path ----*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Writes a fuzz input to a file of a given name in this process's own
// temporary folder, for the readers that open a path (safetensors files,
// checkpoint indexes, tokenizer files).
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_FUZZ_FUZZFILE_H
#define MESHFOLD_FUZZ_FUZZFILE_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace meshfold::fuzz {

/// This process's folder under $TMPDIR (or /tmp), made once.
inline const std::string &folder() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/meshfold-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      std::abort();
    return pattern;
  }();
  return dir;
}

/// Writes \p data to `folder()/name` and returns the path.
inline std::string writeFile(const std::string &name, const uint8_t *data,
                             size_t size) {
  std::string path = folder() + "/" + name;
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0)
    std::abort();
  return path;
}

} // namespace meshfold::fuzz

#endif // MESHFOLD_FUZZ_FUZZFILE_H
