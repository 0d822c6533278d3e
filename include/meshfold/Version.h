//===- Version.h - what every tool's --version prints -----------*- C++ -*-===//

#ifndef MESHFOLD_VERSION_H
#define MESHFOLD_VERSION_H

#include "meshfold/Config.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace meshfold {
/// Prints meshfold's version and the LLVM/MLIR it was built with.
inline void printVersion(llvm::raw_ostream &os) {
  os << MESHFOLD_VERSION_TEXT;
}

/// Makes `--version` print printVersion's lines (instead of LLVM's); call
/// before parsing the command line.
inline void setVersionPrinter() { llvm::cl::SetVersionPrinter(printVersion); }
} // namespace meshfold

#endif // MESHFOLD_VERSION_H
