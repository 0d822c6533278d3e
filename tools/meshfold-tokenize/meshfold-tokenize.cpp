//===- meshfold-tokenize.cpp - a checkpoint's tokenizer on the command line
//===//
//
// meshfold-tokenize --tokenizer PATH [TEXT_FILE] [-o IDS_FILE]
// meshfold-tokenize --tokenizer PATH --decode [IDS_FILE] [-o TEXT_FILE]
//
// Encodes a text prompts file (one prompt per line, the escapes of
// --prompts-text) into a prompts file of token ids, one line per prompt, as
// the emitted program and meshfold-reference read it; --decode turns lines
// of ids back into text lines (special tokens left out, the same escapes).
// The tokenizer is a tokenizer.json, a SentencePiece tokenizer.model or a
// checkpoint folder holding either.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Version.h"
#include "mfrt/io/Json.h"
#include "mfrt/io/Prompts.h"
#include "mfrt/tokenizer/Tokenizer.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>

namespace cl = llvm::cl;

static cl::OptionCategory cat("meshfold-tokenize options");
static cl::opt<std::string>
    inputFile(cl::Positional,
              cl::desc("<input: text lines, or ids with --decode; '-' for "
                       "stdin>"),
              cl::init("-"), cl::cat(cat));
static cl::opt<std::string>
    tokenizerPath("tokenizer",
                  cl::desc("tokenizer.json, tokenizer.model or a checkpoint "
                           "folder holding either"),
                  cl::value_desc("path"), cl::Required, cl::cat(cat));
static cl::opt<std::string>
    outputFile("o", cl::desc("Output file (default: stdout)"),
               cl::value_desc("file"), cl::init("-"), cl::cat(cat));
static cl::opt<bool>
    decode("decode", cl::desc("Decode lines of token ids into text lines"),
           cl::cat(cat));

[[noreturn]] static void die(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "meshfold-tokenize") << message << "\n";
  std::exit(1);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-tokenize: text prompts to token ids (and back) with a "
      "checkpoint's own tokenizer\n");

  std::string error;
  std::unique_ptr<mfrt::Tokenizer> tokenizer =
      mfrt::Tokenizer::load(tokenizerPath, &error);
  if (!tokenizer)
    die(error);

  std::string text;
  std::string name = inputFile == "-" ? "<stdin>" : std::string(inputFile);
  if (inputFile == "-") {
    char buffer[65536];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0)
      text.append(buffer, n);
  } else if (!mfrt::readWholeFile(inputFile, text, error)) {
    die(error);
  }

  std::string out;
  if (decode) {
    std::vector<std::vector<int64_t>> requests;
    if (!mfrt::parsePromptsText(text, name, tokenizer->vocabSize(), requests,
                                &error))
      die(error);
    for (const std::vector<int64_t> &ids : requests)
      out += mfrt::escapePromptText(tokenizer->decode(ids)) + "\n";
  } else {
    std::vector<mfrt::PromptEntry> prompts;
    if (!mfrt::parsePromptLines(text, name, prompts, &error))
      die(error);
    for (const mfrt::PromptEntry &p : prompts) {
      std::vector<int64_t> ids;
      if (!tokenizer->encode(p.text, ids, &error))
        die(name + ": line " + std::to_string(p.line) + ": " + error);
      for (size_t i = 0; i < ids.size(); ++i)
        out += (i ? " " : "") + std::to_string(ids[i]);
      out += "\n";
    }
  }

  // Written whole, only on success.
  std::error_code ec;
  llvm::raw_fd_ostream os(outputFile, ec);
  if (ec)
    die(outputFile + ": cannot write: " + ec.message());
  os << out;
  return 0;
}
