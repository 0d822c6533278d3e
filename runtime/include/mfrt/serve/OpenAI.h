//===- OpenAI.h - OpenAI API requests and responses -------------*- C++ -*-===//
//
// The JSON of the OpenAI completions API as the server reads and writes it
// (OpenAI.cpp): a request body checked field by field, a field of the wrong
// type, out of range, unknown, or one that changes the math and is not
// implemented refused with one line naming it; the responses, the streamed
// chunks and the error bodies in OpenAI's format. No HTTP here.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_SERVE_OPENAI_H
#define MFRT_SERVE_OPENAI_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mfrt::serve {

/// A request body's fields that the server acts on: a completion's
/// (/v1/completions) or a chat completion's (/v1/chat/completions).
struct CompletionRequest {
  bool chat = false;
  std::string model;
  /// Chat: the messages, the tools and chat_template_kwargs for the
  /// template, and whether it adds the assistant's turn.
  nlohmann::ordered_json messages, tools, templateKwargs;
  bool addGenerationPrompt = true;
  /// Chat's logprobs and top_logprobs, as given (folded into `logprobs`).
  bool chatLogprobs = false;
  int64_t chatTopLogprobs = 0;
  /// The prompt: text (to tokenize) or token ids.
  bool textPrompt = true;
  std::string text;
  std::vector<int64_t> ids;
  /// max_tokens (-1: the server's default).
  int64_t maxTokens = -1;
  double temperature = 1.0, topP = 1.0;
  int64_t topK = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  /// logprobs: -1 none, else the top alternatives per token.
  int64_t logprobs = -1;
  bool stream = false, includeUsage = false, ignoreEos = false;
};

/// A failed request: the HTTP status, OpenAI's error type, the field (or
/// "") and one line of message.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error", param, message;
};

/// Reads a /v1/completions body (`chat`: a /v1/chat/completions one). On
/// failure returns false with `error`.
bool parseCompletionRequest(const std::string &body, CompletionRequest &out,
                            ApiError &error, bool chat = false);

/// OpenAI's error body of `error`.
std::string errorBody(const ApiError &error);

/// What a finished or running completion has so far.
struct CompletionState {
  bool chat = false;
  std::string id, model;
  int64_t created = 0;
  std::string text;
  /// Per generated token: its text, logprob and top alternatives (text,
  /// logprob), when logprobs were asked for.
  std::vector<std::string> tokenTexts;
  std::vector<float> tokenLogprobs;
  std::vector<std::vector<std::pair<std::string, float>>> topLogprobs;
  bool logprobs = false;
  std::string finishReason; // "" while running
  int64_t promptTokens = 0, completionTokens = 0;
};

/// The non-streamed response of a completion.
std::string completionResponse(const CompletionState &c);
/// One streamed chunk ("data: {...}\n\n"): `delta` text with the logprobs
/// of tokens `first .. end` (when asked for) and the finish reason once
/// known; a chat's first chunk (`first` 0 and nothing sent) names the role.
std::string completionChunk(const CompletionState &c, const std::string &delta,
                            size_t first, size_t end);
/// The final usage chunk (stream_options.include_usage) and the end marker.
std::string usageChunk(const CompletionState &c);
inline const char *doneChunk() { return "data: [DONE]\n\n"; }

} // namespace mfrt::serve

#endif // MFRT_SERVE_OPENAI_H
