//===- OpenAI.cpp - OpenAI API requests and responses ---------------------===//
//
// The completions API's request fields (checked one by one) and its
// response, chunk and error bodies (OpenAI.h).
//
//===----------------------------------------------------------------------===//

#include "mfrt/serve/OpenAI.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <map>

using namespace mfrt::serve;
using json = nlohmann::ordered_json;

namespace {
/// A field check: fails with "`param` must be `what`".
struct FieldError {
  std::string param, what;
};

[[noreturn]] void bad(const std::string &param, const std::string &what) {
  throw FieldError{param, what};
}

int64_t integer(const json &v, const std::string &param, int64_t lo,
                int64_t hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad(param,
        "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return v.get<int64_t>();
}

double number(const json &v, const std::string &param, double lo, double hi) {
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi))
    bad(param, "a number from " + std::to_string(lo).substr(0, 3) + " to " +
                   std::to_string(hi).substr(0, 3));
  return v.get<double>();
}

bool boolean(const json &v, const std::string &param) {
  if (!v.is_boolean())
    bad(param, "true or false");
  return v.get<bool>();
}

/// The prompt: a string, an array of token ids, or an array of one of
/// either (one prompt per request: n = 1).
void readPrompt(const json &v, CompletionRequest &out) {
  const json *p = &v;
  if (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array()))
    p = &v[0];
  if (p->is_string()) {
    out.textPrompt = true;
    out.text = p->get<std::string>();
    return;
  }
  if (!p->is_array() || p->empty())
    bad("prompt", "a string or an array of token ids (one prompt per "
                  "request)");
  out.textPrompt = false;
  for (const json &id : *p) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      bad("prompt", "a string or an array of token ids (one prompt per "
                    "request)");
    out.ids.push_back(id.get<int64_t>());
  }
}

void readStop(const json &v, CompletionRequest &out) {
  if (v.is_string()) {
    out.stop = {v.get<std::string>()};
  } else if (v.is_array() && v.size() <= 4) {
    for (const json &s : v) {
      if (!s.is_string())
        bad("stop", "a string or an array of at most 4 strings");
      out.stop.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "a string or an array of at most 4 strings");
  }
  for (const std::string &s : out.stop)
    if (s.empty())
      bad("stop", "non-empty strings");
}

/// Fields that change the math and that the server does not implement:
/// accepted only at their neutral value.
void readNeutral(const std::string &key, const json &v) {
  bool neutral =
      (key == "n" || key == "best_of")
          ? v.is_number_integer() && v.get<int64_t>() == 1
      : key == "echo"       ? v.is_boolean() && !v.get<bool>()
      : key == "logit_bias" ? v.is_object() && v.empty()
      : key == "suffix"     ? v.is_string() && v.get<std::string>().empty()
      : key == "min_tokens" ? v.is_number_integer() && v.get<int64_t>() == 0
      : key == "repetition_penalty" ? v.is_number() && v.get<double>() == 1.0
                                    : v.is_number() && v.get<double>() == 0.0;
  if (!neutral)
    bad(key, key == "n" || key == "best_of" ? "1 (one completion per request)"
             : key == "echo"                ? "false (echo is not supported)"
             : key == "logit_bias" || key == "suffix"
                 ? "empty (" + key + " is not supported)"
             : key == "repetition_penalty"
                 ? "1 (penalties are not supported)"
                 : "0 (" + key + " is not supported)");
}

/// Chat messages: objects with a role and a content (a string, null, or an
/// array of text parts, joined); other fields (name, tool_calls,
/// tool_call_id, reasoning_content) go to the template as they are.
void readMessages(const json &v, CompletionRequest &out) {
  if (!v.is_array() || v.empty())
    bad("messages", "a non-empty array of messages");
  out.messages = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    std::string at = "messages[" + std::to_string(i) + "]";
    const json &m = v[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad(at, "an object with a \"role\" string");
    json msg = m;
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const json &part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" ||
            !part.contains("text") || !part["text"].is_string())
          bad(at + ".content", "a string or an array of text parts (only "
                               "text is supported)");
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (m.contains("content") && !m["content"].is_string() &&
               !m["content"].is_null()) {
      bad(at + ".content", "a string, null or an array of text parts");
    }
    out.messages.push_back(msg);
  }
}

void readChatField(const std::string &key, const json &v,
                   CompletionRequest &out) {
  if (key == "messages")
    return readMessages(v, out);
  if (key == "max_completion_tokens")
    return void(out.maxTokens = integer(v, key, 1, int64_t(1) << 24));
  if (key == "logprobs")
    return void(out.chatLogprobs = boolean(v, key));
  if (key == "top_logprobs")
    return void(out.chatTopLogprobs = integer(v, key, 0, 20));
  if (key == "tools") {
    if (!v.is_array())
      bad(key, "an array of tools");
    out.tools = v;
    return;
  }
  if (key == "tool_choice") {
    if (!v.is_string() || (v != "none" && v != "auto"))
      bad(key, "\"none\" or \"auto\" (tool calls are not parsed: the "
               "text the model writes is returned)");
    return;
  }
  if (key == "parallel_tool_calls") {
    boolean(v, key);
    return;
  }
  if (key == "chat_template_kwargs") {
    if (!v.is_object())
      bad(key, "an object");
    out.templateKwargs = v;
    return;
  }
  if (key == "add_generation_prompt")
    return void(out.addGenerationPrompt = boolean(v, key));
  if (key == "response_format") {
    if (!v.is_object() || v.value("type", "") != "text" || v.size() != 1)
      bad(key, "{\"type\": \"text\"} (structured output is not supported)");
    return;
  }
  bad(key, "absent (unknown field)");
}

void readField(const std::string &key, const json &v, CompletionRequest &out) {
  static const std::map<std::string,
                        std::function<void(const json &, CompletionRequest &)>>
      fields = {
          {"model",
           [](const json &v, CompletionRequest &o) {
             if (!v.is_string())
               bad("model", "a string");
             o.model = v.get<std::string>();
           }},
          {"prompt",
           [](const json &v, CompletionRequest &o) {
             if (o.chat)
               bad("prompt", "absent: a chat completion takes messages");
             readPrompt(v, o);
           }},
          {"max_tokens",
           [](const json &v, CompletionRequest &o) {
             o.maxTokens = integer(v, "max_tokens", 1, int64_t(1) << 24);
           }},
          {"temperature",
           [](const json &v, CompletionRequest &o) {
             o.temperature = number(v, "temperature", 0, 2);
           }},
          {"top_p",
           [](const json &v, CompletionRequest &o) {
             o.topP = number(v, "top_p", 0, 1);
             if (o.topP <= 0)
               bad("top_p", "greater than 0 and at most 1");
           }},
          {"top_k",
           [](const json &v, CompletionRequest &o) {
             o.topK = std::max<int64_t>(0, integer(v, "top_k", -1, INT32_MAX));
           }},
          {"seed",
           [](const json &v, CompletionRequest &o) {
             if (!v.is_number_integer())
               bad("seed", "an integer");
             o.seed = uint64_t(v.get<int64_t>());
           }},
          {"stop", readStop},
          {"logprobs",
           [](const json &v, CompletionRequest &o) {
             if (o.chat)
               return readChatField("logprobs", v, o);
             o.logprobs = integer(v, "logprobs", 0, 20);
           }},
          {"stream",
           [](const json &v, CompletionRequest &o) {
             o.stream = boolean(v, "stream");
           }},
          {"stream_options",
           [](const json &v, CompletionRequest &o) {
             if (!v.is_object())
               bad("stream_options", "an object");
             for (const auto &[k, x] : v.items()) {
               if (k != "include_usage")
                 bad("stream_options." + k, "absent (unknown field)");
               o.includeUsage = boolean(x, "stream_options.include_usage");
             }
           }},
          {"ignore_eos",
           [](const json &v, CompletionRequest &o) {
             o.ignoreEos = boolean(v, "ignore_eos");
           }},
          {"user",
           [](const json &v, CompletionRequest &) {
             if (!v.is_string())
               bad("user", "a string");
           }},
      };
  if (auto it = fields.find(key); it != fields.end())
    return it->second(v, out);
  for (const char *neutral :
       {"n", "best_of", "echo", "logit_bias", "suffix", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "min_tokens"})
    if (key == neutral)
      return readNeutral(key, v);
  if (out.chat)
    return readChatField(key, v, out);
  bad(key, "absent (unknown field)");
}
} // namespace

bool mfrt::serve::parseCompletionRequest(const std::string &body,
                                         CompletionRequest &out,
                                         ApiError &error, bool chat) {
  out.chat = chat;
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    error.message = doc.is_discarded() ? "the body is not valid JSON"
                                       : "the body must be a JSON object";
    return false;
  }
  try {
    bool prompt = false;
    for (const auto &[key, v] : doc.items()) {
      if (v.is_null())
        continue; // absent
      readField(key, v, out);
      prompt |= key == (chat ? "messages" : "prompt");
    }
    if (!prompt)
      bad(chat ? "messages" : "prompt", "given");
    if (chat)
      out.logprobs = out.chatLogprobs ? out.chatTopLogprobs : -1;
    if (!out.stream && out.includeUsage)
      bad("stream_options", "given only with stream: true");
  } catch (const FieldError &e) {
    error.param = e.param;
    error.message = "'" + e.param + "' must be " + e.what;
    return false;
  }
  return true;
}

std::string mfrt::serve::errorBody(const ApiError &error) {
  json e;
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param.empty() ? json(nullptr) : json(error.param);
  e["code"] = error.status;
  json doc;
  doc["error"] = e;
  return doc.dump();
}

namespace {
std::string dump(const json &j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// The completions API's logprobs object for tokens `first .. end`.
json logprobsOf(const CompletionState &c, size_t first, size_t end) {
  if (!c.logprobs)
    return nullptr;
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < first && i < c.tokenTexts.size(); ++i)
    offset += c.tokenTexts[i].size();
  for (size_t i = first; i < end && i < c.tokenTexts.size(); ++i) {
    tokens.push_back(c.tokenTexts[i]);
    values.push_back(c.tokenLogprobs[i]);
    json top = json::object();
    for (const auto &[text, lp] : c.topLogprobs[i])
      if (!top.contains(text))
        top[text] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += c.tokenTexts[i].size();
  }
  json lp;
  lp["tokens"] = tokens;
  lp["token_logprobs"] = values;
  lp["top_logprobs"] = tops;
  lp["text_offset"] = offsets;
  return lp;
}

/// A chat completion's logprobs object for tokens `first .. end`.
json chatLogprobsOf(const CompletionState &c, size_t first, size_t end) {
  if (!c.logprobs)
    return nullptr;
  auto entry = [](const std::string &token, float logprob) {
    json e;
    e["token"] = token;
    e["logprob"] = logprob;
    e["bytes"] = json::array();
    for (unsigned char b : token)
      e["bytes"].push_back(int(b));
    return e;
  };
  json content = json::array();
  for (size_t i = first; i < end && i < c.tokenTexts.size(); ++i) {
    json e = entry(c.tokenTexts[i], c.tokenLogprobs[i]);
    e["top_logprobs"] = json::array();
    for (const auto &[text, lp] : c.topLogprobs[i])
      e["top_logprobs"].push_back(entry(text, lp));
    content.push_back(e);
  }
  json lp;
  lp["content"] = content;
  return lp;
}

json header(const CompletionState &c, bool chunk = false) {
  json doc;
  doc["id"] = c.id;
  doc["object"] = c.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                         : "text_completion";
  doc["created"] = c.created;
  doc["model"] = c.model;
  return doc;
}

json usageOf(const CompletionState &c) {
  json u;
  u["prompt_tokens"] = c.promptTokens;
  u["completion_tokens"] = c.completionTokens;
  u["total_tokens"] = c.promptTokens + c.completionTokens;
  return u;
}
} // namespace

std::string mfrt::serve::completionResponse(const CompletionState &c) {
  json doc = header(c);
  json choice;
  choice["index"] = 0;
  if (c.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    choice["logprobs"] = chatLogprobsOf(c, 0, c.tokenTexts.size());
  } else {
    choice["text"] = c.text;
    choice["logprobs"] = logprobsOf(c, 0, c.tokenTexts.size());
  }
  choice["finish_reason"] = c.finishReason;
  doc["choices"] = json::array({choice});
  doc["usage"] = usageOf(c);
  return dump(doc);
}

std::string mfrt::serve::completionChunk(const CompletionState &c,
                                         const std::string &delta, size_t first,
                                         size_t end) {
  json doc = header(c, true);
  json choice;
  choice["index"] = 0;
  if (c.chat) {
    json d = json::object();
    if (first == 0 && end == 0 && delta.empty() && c.finishReason.empty())
      d["role"] = "assistant";
    if (!delta.empty() || d.contains("role"))
      d["content"] = delta;
    choice["delta"] = d;
    choice["logprobs"] = chatLogprobsOf(c, first, end);
  } else {
    choice["text"] = delta;
    choice["logprobs"] = logprobsOf(c, first, end);
  }
  choice["finish_reason"] =
      c.finishReason.empty() ? json(nullptr) : json(c.finishReason);
  doc["choices"] = json::array({choice});
  return "data: " + dump(doc) + "\n\n";
}

std::string mfrt::serve::usageChunk(const CompletionState &c) {
  json doc = header(c, true);
  doc["choices"] = json::array();
  doc["usage"] = usageOf(c);
  return "data: " + dump(doc) + "\n\n";
}
