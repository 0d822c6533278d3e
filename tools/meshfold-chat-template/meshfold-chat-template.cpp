//===- meshfold-chat-template.cpp - render a checkpoint's chat template ---===//
//
// meshfold-chat-template TEMPLATE --context CONTEXT.json [-o OUT]
//
// Renders a chat template as --serve's chat completions do: TEMPLATE is a
// checkpoint folder, its tokenizer_config.json or a template file (.jinja);
// CONTEXT.json an object with "messages" and optionally
// "add_generation_prompt", "tools" and other variables. Prints the text,
// exactly (no newline added).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Version.h"
#include "mfrt/io/Json.h"
#include "mfrt/jinja/ChatTemplate.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace cl = llvm::cl;
using json = nlohmann::ordered_json;

static cl::OptionCategory cat("meshfold-chat-template options");
static cl::opt<std::string>
    templatePath(cl::Positional,
                 cl::desc("<checkpoint folder, tokenizer_config.json or "
                          "template file>"),
                 cl::Required, cl::cat(cat));
static cl::opt<std::string>
    contextFile("context",
                cl::desc("JSON object: messages, add_generation_prompt, "
                         "tools, other variables"),
                cl::value_desc("file"), cl::Required, cl::cat(cat));
static cl::opt<std::string>
    outputFile("o", cl::desc("Output file (default: stdout)"),
               cl::value_desc("file"), cl::init("-"), cl::cat(cat));

[[noreturn]] static void die(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "meshfold-chat-template")
      << message << "\n";
  std::exit(1);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-chat-template: renders a checkpoint's chat template\n");
  std::string error, text;
  auto chat = mfrt::jinja::ChatTemplate::load(templatePath, &error);
  if (!chat)
    die(error.empty() ? templatePath + ": has no chat template" : error);
  if (!mfrt::readWholeFile(contextFile, text, error))
    die(error);
  json context = json::parse(text, nullptr, false);
  if (context.is_discarded() || !context.is_object() ||
      !context.contains("messages") || !context["messages"].is_array())
    die(contextFile + ": must be a JSON object with a \"messages\" array");
  json variables = context;
  variables.erase("messages");
  variables.erase("add_generation_prompt");
  std::string out;
  if (!chat->render(context["messages"],
                    context.value("add_generation_prompt", false), variables,
                    out, &error))
    die(chat->file + ": " + error);
  if (outputFile == "-") {
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else if (!mfrt::writeWholeFile(outputFile, out, error)) {
    die(error);
  }
  return 0;
}
