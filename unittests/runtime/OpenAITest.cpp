//===- OpenAITest.cpp - The server's OpenAI request and response JSON -----===//

#include "mfrt/serve/OpenAI.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace mfrt::serve;

namespace {
ApiError refused(const std::string &body) {
  CompletionRequest r;
  ApiError e;
  EXPECT_FALSE(parseCompletionRequest(body, r, e)) << body;
  return e;
}
} // namespace

TEST(OpenAI, ReadsEveryField) {
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(parseCompletionRequest(
      R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 7,
          "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 11,
          "stop": ["a", "bc"], "logprobs": 2, "stream": true,
          "stream_options": {"include_usage": true}, "ignore_eos": true,
          "n": 1, "echo": false, "presence_penalty": 0, "user": "u",
          "suffix": null})",
      r, e))
      << e.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_FALSE(r.textPrompt);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.maxTokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.topP, 0.9);
  EXPECT_EQ(r.topK, 40);
  EXPECT_EQ(*r.seed, 11u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.stream && r.includeUsage && r.ignoreEos);
}

TEST(OpenAI, Defaults) {
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(parseCompletionRequest(R"({"prompt": ["one text"]})", r, e));
  EXPECT_TRUE(r.textPrompt);
  EXPECT_EQ(r.text, "one text");
  EXPECT_EQ(r.maxTokens, -1);
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
}

TEST(OpenAI, RefusesWithTheField) {
  EXPECT_EQ(refused("{").message, "the body is not valid JSON");
  EXPECT_EQ(refused("[1]").message, "the body must be a JSON object");
  EXPECT_EQ(refused("{}").message, "'prompt' must be given");
  EXPECT_EQ(refused(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(refused(R"({"prompt": "x", "max_tokens": 1.5})").param,
            "max_tokens");
  EXPECT_EQ(refused(R"({"prompt": "x", "temperature": "hot"})").param,
            "temperature");
  EXPECT_EQ(refused(R"({"prompt": "x", "top_p": 0})").param, "top_p");
  EXPECT_EQ(refused(R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": "x", "stop": ["a","b","c","d","e"]})").param,
            "stop");
  EXPECT_EQ(refused(R"({"prompt": "x", "stop": ""})").param, "stop");
  EXPECT_EQ(refused(R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(refused(R"({"prompt": "x", "wat": 1})").message,
            "'wat' must be absent (unknown field)");
  EXPECT_EQ(refused(R"({"prompt": "x", "stream_options": {"include_usage":
            true}})")
                .param,
            "stream_options");
}

TEST(OpenAI, RefusesWhatChangesTheMathUnimplemented) {
  for (const char *body :
       {R"({"prompt": "x", "n": 2})", R"({"prompt": "x", "best_of": 3})",
        R"({"prompt": "x", "echo": true})",
        R"({"prompt": "x", "logit_bias": {"5": 1}})",
        R"({"prompt": "x", "presence_penalty": 0.5})",
        R"({"prompt": "x", "frequency_penalty": -1})",
        R"({"prompt": "x", "repetition_penalty": 1.1})",
        R"({"prompt": "x", "suffix": "end"})",
        R"({"prompt": "x", "min_tokens": 3})"})
    EXPECT_FALSE(refused(body).param.empty()) << body;
}

TEST(OpenAI, Responses) {
  CompletionState c;
  c.id = "cmpl-1";
  c.model = "m";
  c.created = 5;
  c.text = "ab";
  c.logprobs = true;
  c.tokenTexts = {"a", "b"};
  c.tokenLogprobs = {-0.5f, -1.0f};
  c.topLogprobs = {{{"a", -0.5f}}, {{"b", -1.0f}, {"c", -1.5f}}};
  c.finishReason = "length";
  c.promptTokens = 3;
  c.completionTokens = 2;
  auto doc = nlohmann::json::parse(completionResponse(c));
  EXPECT_EQ(doc["object"], "text_completion");
  EXPECT_EQ(doc["choices"][0]["text"], "ab");
  EXPECT_EQ(doc["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(doc["choices"][0]["logprobs"]["text_offset"],
            nlohmann::json::array({0, 1}));
  EXPECT_EQ(doc["choices"][0]["logprobs"]["top_logprobs"][1].size(), 2u);
  EXPECT_EQ(doc["usage"]["total_tokens"], 5);
  std::string chunk = completionChunk(c, "b", 1, 2);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  auto part = nlohmann::json::parse(chunk.substr(6));
  EXPECT_EQ(part["choices"][0]["text"], "b");
  EXPECT_EQ(part["choices"][0]["logprobs"]["text_offset"][0], 1);
  ApiError e;
  e.status = 429;
  e.type = "rate_limit_error";
  e.message = "full";
  auto err = nlohmann::json::parse(errorBody(e));
  EXPECT_EQ(err["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(err["error"]["param"].is_null());
}
