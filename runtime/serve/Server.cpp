//===- Server.cpp - The emitted program's OpenAI-compatible server --------===//
//
// The HTTP side (handlers on cpp-httplib's thread pool) and the scheduler's
// side (take(), called by rank 0 at each call of the generation loop) share
// the jobs under one mutex: a job waits in `pending` until a request slot is
// free, then lives in `active` (by slot) until its outputs say it finished
// and a later take() saw that too (by then every rank is done with the
// slot, which is reused). Handlers wait on one condition variable, woken
// when a recorder appends tokens.
//
//===----------------------------------------------------------------------===//

#include "mfrt/serve/Server.h"

#include "mfrt/jinja/ChatTemplate.h"
#include "mfrt/program/KVCache.h"
#include "mfrt/program/Options.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Run.h"
#include "mfrt/program/Serving.h"
#include "mfrt/serve/Connection.h"
#include "mfrt/serve/Metrics.h"
#include "mfrt/serve/OpenAI.h"
#include "mfrt/tokenizer/Tokenizer.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include <sys/socket.h>

using namespace mfrt;
using namespace mfrt::serve;

namespace {
/// SIGTERM / SIGINT: the server stops admission and drains.
std::atomic<bool> gStopAsked{false};
extern "C" void onStopSignal(int) { gStopAsked = true; }

/// One HTTP request's completion.
struct Job {
  CompletionRequest request;
  std::vector<int64_t> prompt;
  Generation gen;
  /// Its outputs once it has a slot (then `slot` and `replica`), and the
  /// tokens it adds to its replica's load.
  std::shared_ptr<RequestOutput> out;
  int64_t slot = -1, replica = -1, load = 0;
  /// Asked to end (client gone, stop string), and told to the ranks.
  bool cancel = false, cancelSent = false;
  /// A take() saw its outputs finished (the next one frees its slot).
  bool seenFinished = false;
  /// Never placed: cancelled or refused while it waited.
  bool dropped = false;
  double arrival = 0;
  /// The generated text so far, decoded incrementally (appendText).
  size_t prefixOffset = 0, readOffset = 0;
};

/// Appends to `text` the text of `ids` past `job.readOffset`, decoding only
/// from a few tokens before them (vLLM's incremental detokenization): a
/// token's text may depend on the ones before it (a leading space, a
/// character split over byte tokens), so the new text is the decode of
/// ids[prefixOffset..] past that of ids[prefixOffset..readOffset]. A tail
/// that ends in an unfinished character (U+FFFD) waits for more tokens,
/// unless `final`.
void appendText(const Tokenizer &tok, const std::vector<int64_t> &ids, Job &job,
                std::string &text, bool final) {
  if (ids.size() <= job.readOffset)
    return;
  auto from = ids.begin() + int64_t(job.prefixOffset);
  std::string before =
      tok.decode({from, ids.begin() + int64_t(job.readOffset)});
  std::string now = tok.decode({from, ids.end()});
  // A character split over byte tokens decodes as U+FFFD until it ends.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  bool unfinished =
      now.size() >= 3 && now.compare(now.size() - 3, 3, kReplacement) == 0;
  if ((unfinished && !final) || now.size() < before.size() ||
      now.compare(0, before.size(), before) != 0) {
    if (!final)
      return;
    // The window changed what it decoded before: the whole text anew.
    text = tok.decode(ids);
  } else {
    text += now.substr(before.size());
  }
  job.prefixOffset = job.readOffset;
  job.readOffset = ids.size();
}

/// HOST:PORT of --serve.
struct Address {
  std::string host;
  int port = 0;
};

Address parseAddress(const std::string &text) {
  size_t colon = text.rfind(':');
  Address a;
  if (colon == std::string::npos || colon == 0)
    die("--serve must be HOST:PORT (127.0.0.1:8000; port 0 picks a free "
        "one), got '" +
        text + "'");
  a.host = text.substr(0, colon);
  std::string port = text.substr(colon + 1);
  char *end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || p < 0 || p > 65535)
    die("--serve " + text + ": the port must be a number from 0 to 65535");
  a.port = int(p);
  return a;
}

bool loopback(const std::string &host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

class Server final : public RequestSource {
public:
  Server(const Options &options, Program &prog);
  /// Binds --serve's address (failing in one line), then serves HTTP on a
  /// thread of its own.
  void start();
  /// Stops admission; take() ends the run once every job finished.
  void drain();
  /// Waits (bounded) for the handlers still answering, then stops HTTP.
  void stop();
  Intake take(bool idle) override;
  void progressed() override;
  void stepped(const std::vector<int64_t> &batches) override {
    for (int64_t b : batches)
      metrics_.batch(b);
  }
  int port() const { return port_; }

private:
  void routes();
  void loadChatTemplate();
  void completions(const httplib::Request &req, httplib::Response &res,
                   bool chat);
  bool authorized(const httplib::Request &req, httplib::Response &res);
  void fail(httplib::Response &res, const ApiError &e, const char *what);
  bool admit(const CompletionRequest &r, std::shared_ptr<Job> &job,
             ApiError &e);
  bool tokenize(const CompletionRequest &r, std::vector<int64_t> &ids,
                ApiError &e);
  Generation settingsOf(const CompletionRequest &r, int64_t maxTokens);
  void retire(Intake &in);
  void place(Intake &in);
  /// Waits until `job` has more than `seen` tokens or finished (bounded);
  /// fills `state` from its outputs. Returns whether it is over.
  bool follow(Job &job, CompletionState &state, size_t &seen,
              double &lastToken);
  void cancel(Job &job);
  void finishMetrics(const Job &job, const CompletionState &state);
  std::string respondWhole(Job &job, CompletionState &state,
                           const httplib::Request &req);
  bool stream(Job &job, CompletionState &state, httplib::DataSink &sink);
  CompletionState stateOf(const Job &job);

  const Options &options_;
  Program &prog_;
  Address address_;
  int port_ = 0;
  std::string model_;
  /// The chat template (null: the checkpoint has none; chat completions
  /// are then refused).
  std::unique_ptr<jinja::ChatTemplate> chat_;
  int64_t replicas_ = 1, capacity_ = 0, kvCapacity_ = -1;
  httplib::Server http_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> pending_;
  std::map<int64_t, std::shared_ptr<Job>> active_;
  std::vector<int64_t> freeSlots_;
  std::vector<int64_t> replicaLoad_;
  int64_t outstanding_ = 0, handlers_ = 0, serial_ = 0;
  bool draining_ = false, ready_ = false;
  std::mt19937_64 seeds_{std::random_device{}()};
  Metrics metrics_;
};

Server::Server(const Options &options, Program &prog)
    : options_(options), prog_(prog), address_(parseAddress(options.serve)) {
  if (!loopback(address_.host) && options.apiKey.empty())
    die("--serve " + options.serve +
        ": serving beyond this machine needs --api-key KEY");
  if (!prog.prompts.tokenizer)
    die("--serve needs the model's tokenizer (tokenizer.json or "
        "tokenizer.model beside --weights, or --tokenizer PATH)");
  model_ = options.servedModelName;
  if (model_.empty()) {
    std::string w =
        options.weights.empty() ? "random-weights" : options.weights;
    while (w.size() > 1 && w.back() == '/')
      w.pop_back();
    model_ = w.substr(w.find_last_of('/') + 1);
  }
  meshfold::MeshLayout layout = layoutOf(prog.manifest);
  replicas_ = layout.hasAxis("dp") ? layout.axisSize("dp") : 1;
  replicaLoad_.assign(size_t(replicas_), 0);
  // The slots: every replica's batch, the queue, and the slots whose
  // requests finished but which a take() has yet to see twice.
  capacity_ = replicas_ * prog.generation.maxBatch + options.maxQueue +
              2 * kIntakeRequests;
  prepareServing(prog, capacity_);
  for (int64_t s = capacity_ - 1; s >= 0; --s)
    freeSlots_.push_back(s);
  kvCapacity_ = kvBlockCapacity(prog.manifest, prog.kv);
  loadChatTemplate();
  routes();
}

/// --chat-template's, else the one beside the tokenizer (none: chat
/// completions are refused). One that cannot be rendered fails the start.
void Server::loadChatTemplate() {
  std::string path = options_.chatTemplate, error;
  if (path.empty()) {
    path = prog_.prompts.tokenizer->path();
    size_t slash = path.find_last_of('/');
    path = slash == std::string::npos ? "." : path.substr(0, slash);
  }
  chat_ = jinja::ChatTemplate::load(path, &error);
  if (!chat_ && (!error.empty() || !options_.chatTemplate.empty()))
    die("--chat-template: " +
        (error.empty() ? path + " has no chat template" : error));
}

void Server::start() {
  // Each streaming client holds a thread while its tokens come.
  size_t threads = size_t(std::min<int64_t>(
      1024, replicas_ * prog_.generation.maxBatch + options_.maxQueue + 8));
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_.set_payload_max_length(16u << 20);
  // The listening socket, to raise its backlog once bound: the library's
  // is 5, and a burst of clients connecting at once overflowed it (the
  // kernel then answers with SYN cookies, and connections were reset).
  int listening = -1;
  http_.set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = sock;
  });
  bool bound = address_.port == 0
                   ? (port_ = http_.bind_to_any_port(address_.host)) > 0
                   : http_.bind_to_port(address_.host, port_ = address_.port);
  if (!bound)
    die("--serve " + options_.serve + ": cannot listen there (" +
        std::strerror(errno) + ")");
  if (listening >= 0)
    ::listen(listening, SOMAXCONN);
  thread_ = std::thread([this] { http_.listen_after_bind(); });
  int64_t stepRows = prog_.generation.stepTokens;
  std::string steps =
      stepRows > 0 ? "steps of at most " + std::to_string(stepRows) + " rows"
                   : std::string("steps of any size");
  std::printf("serving %s at http://%s:%d (%d ranks; %s, prefix cache %s); "
              "SIGTERM drains and stops\n",
              model_.c_str(), address_.host.c_str(), port_,
              ranksOfPlan(planText(prog_.manifest)), steps.c_str(),
              prog_.prefixCache ? "on" : "off");
  std::fflush(stdout);
}

void Server::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  cv_.notify_all();
}

void Server::stop() {
  double until = secondsNow() + 10;
  std::unique_lock<std::mutex> lock(mutex_);
  while (handlers_ > 0 && secondsNow() < until)
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  lock.unlock();
  http_.stop();
  if (thread_.joinable())
    thread_.join();
}

void Server::progressed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
  }
  cv_.notify_all();
}

/// Frees the slots of jobs that a take() saw finished before, and passes
/// on the cancellations of running ones.
void Server::retire(Intake &in) {
  for (auto it = active_.begin(); it != active_.end();) {
    Job &job = *it->second;
    bool finished;
    {
      std::lock_guard<std::mutex> lock(job.out->mutex);
      finished = job.out->finished;
    }
    if (finished && job.seenFinished) {
      freeSlots_.push_back(job.slot);
      replicaLoad_[size_t(job.replica)] -= job.load;
      it = active_.erase(it);
      continue;
    }
    job.seenFinished = finished;
    if (!finished && job.cancel && !job.cancelSent &&
        int64_t(in.cancelled.size()) < kIntakeRequests) {
      in.cancelled.push_back(job.slot);
      job.cancelSent = true;
    }
    ++it;
  }
}

/// Gives waiting jobs free slots, each on the replica with the least work.
void Server::place(Intake &in) {
  while (!pending_.empty() && !freeSlots_.empty() &&
         int64_t(in.arrived.size()) < kIntakeRequests) {
    std::shared_ptr<Job> job = pending_.front();
    pending_.pop_front();
    if (job->cancel) {
      job->dropped = true;
      continue;
    }
    job->slot = freeSlots_.back();
    freeSlots_.pop_back();
    job->replica =
        int64_t(std::min_element(replicaLoad_.begin(), replicaLoad_.end()) -
                replicaLoad_.begin());
    job->load = int64_t(job->prompt.size()) + job->gen.maxNewTokens;
    replicaLoad_[size_t(job->replica)] += job->load;
    placeRequest(prog_, job->slot, job->prompt, job->gen);
    job->out = prog_.outputs[size_t(job->slot)];
    active_[job->slot] = job;
    in.arrived.emplace_back(job->slot, job->replica);
  }
}

Intake Server::take(bool idle) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_ = true;
  if (idle && pending_.empty() && !draining_)
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  Intake in;
  retire(in);
  place(in);
  in.stop = draining_ && pending_.empty() && active_.empty();
  metrics_.load(int64_t(pending_.size()), int64_t(active_.size()),
                prog_.kvBlocksInUse.load(), kvCapacity_);
  lock.unlock();
  cv_.notify_all();
  return in;
}

void Server::fail(httplib::Response &res, const ApiError &e, const char *what) {
  res.status = e.status;
  res.set_content(errorBody(e), "application/json");
  metrics_.request(e.status);
  if (!options_.quiet)
    std::fprintf(stderr, "%s: %d %s: %s\n", programName(), e.status, what,
                 e.message.c_str());
}

bool Server::authorized(const httplib::Request &req, httplib::Response &res) {
  if (options_.apiKey.empty() ||
      req.get_header_value("Authorization") == "Bearer " + options_.apiKey)
    return true;
  ApiError e;
  e.status = 401;
  e.message = "missing or wrong API key (Authorization: Bearer KEY)";
  fail(res, e, req.path.c_str());
  return false;
}

void Server::routes() {
  http_.Get("/health", [this](const httplib::Request &,
                              httplib::Response &res) {
    std::lock_guard<std::mutex> lock(mutex_);
    res.status = ready_ ? (draining_ ? 503 : 200) : 503;
    res.set_content(ready_ ? (draining_ ? "draining\n" : "ok\n") : "loading\n",
                    "text/plain");
  });
  http_.Get("/metrics",
            [this](const httplib::Request &, httplib::Response &res) {
              res.set_content(metrics_.text(), "text/plain; version=0.0.4");
            });
  http_.Get("/v1/models",
            [this](const httplib::Request &req, httplib::Response &res) {
              if (!authorized(req, res))
                return;
              nlohmann::ordered_json model, doc;
              model["id"] = model_;
              model["object"] = "model";
              model["created"] = 0;
              model["owned_by"] = "meshfold";
              model["max_model_len"] = prog_.manifest.maxPositions;
              doc["object"] = "list";
              doc["data"] = nlohmann::ordered_json::array({model});
              res.set_content(doc.dump(), "application/json");
            });
  http_.Post("/v1/completions",
             [this](const httplib::Request &req, httplib::Response &res) {
               completions(req, res, false);
             });
  http_.Post("/v1/chat/completions",
             [this](const httplib::Request &req, httplib::Response &res) {
               completions(req, res, true);
             });
  http_.set_error_handler(
      [this](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty())
          return;
        ApiError e;
        e.status = res.status;
        e.message = res.status == 404   ? "no route " + req.method + " " +
                                              req.path + " (see --help)"
                    : res.status == 413 ? "the request body is over 16 MiB"
                                        : "HTTP " + std::to_string(res.status);
        fail(res, e, req.path.c_str());
      });
}

bool Server::tokenize(const CompletionRequest &r, std::vector<int64_t> &ids,
                      ApiError &e) {
  std::string error, text;
  if (r.chat) {
    if (!chat_) {
      e.param = "messages";
      e.message = "this model has no chat template (serve it with "
                  "--chat-template PATH)";
      return false;
    }
    nlohmann::ordered_json vars = r.templateKwargs.is_object()
                                      ? r.templateKwargs
                                      : nlohmann::ordered_json::object();
    if (!r.tools.is_null())
      vars["tools"] = r.tools;
    if (!chat_->render(r.messages, r.addGenerationPrompt, vars, text, &error)) {
      e.param = "messages";
      e.message = "the chat template refuses these messages: " + error;
      return false;
    }
    // The template wrote the special tokens (BOS) itself.
    if (!prog_.prompts.tokenizer->encode(text, ids, &error, false)) {
      e.param = "messages";
      e.message = error;
      return false;
    }
  } else if (!r.textPrompt) {
    ids = r.ids;
  } else if (!prog_.prompts.tokenizer->encode(r.text, ids, &error)) {
    e.param = "prompt";
    e.message = error;
    return false;
  }
  for (int64_t id : ids)
    if (id >= prog_.manifest.vocab) {
      e.param = "prompt";
      e.message = "token id " + std::to_string(id) +
                  " is not below the model's vocabulary size " +
                  std::to_string(prog_.manifest.vocab);
      return false;
    }
  if (ids.empty()) {
    e.param = "prompt";
    e.message = "the prompt has no tokens";
    return false;
  }
  return true;
}

Generation Server::settingsOf(const CompletionRequest &r, int64_t maxTokens) {
  Generation g = prog_.generation;
  g.maxNewTokens = maxTokens;
  g.temperature = r.temperature;
  g.topP = r.topP;
  g.topK = r.topK;
  g.ignoreEos = r.ignoreEos;
  g.logprobs = r.logprobs;
  g.seedGiven = true;
  std::lock_guard<std::mutex> lock(mutex_);
  g.seed = r.seed ? *r.seed : seeds_();
  return g;
}

/// Checks `r` against the model (context, K/V cache) and queues its job;
/// fails with the status the client gets.
bool Server::admit(const CompletionRequest &r, std::shared_ptr<Job> &job,
                   ApiError &e) {
  if (!r.model.empty() && r.model != model_) {
    e.status = 404;
    e.param = "model";
    e.message = "the model '" + r.model + "' does not exist (this server " +
                "serves '" + model_ + "')";
    return false;
  }
  std::vector<int64_t> ids;
  if (!tokenize(r, ids, e))
    return false;
  int64_t prompt = int64_t(ids.size()), context = prog_.manifest.maxPositions;
  int64_t maxTokens =
      r.maxTokens > 0 ? r.maxTokens : prog_.generation.maxNewTokens;
  if (r.maxTokens <= 0 && context > 0)
    maxTokens = std::max<int64_t>(1, std::min(maxTokens, context - prompt));
  if (context > 0 && prompt + maxTokens > context) {
    e.param = r.maxTokens > 0 ? "max_tokens" : "prompt";
    e.message = "this model's context is " + std::to_string(context) +
                " tokens; the request asks for " +
                std::to_string(prompt + maxTokens) + " (" +
                std::to_string(prompt) + " in the prompt, " +
                std::to_string(maxTokens) + " to generate)";
    return false;
  }
  int64_t blocks = kvBlocksFor(prompt + maxTokens - 1, prog_.kv.blockTokens);
  if (kvCapacity_ >= 0 && blocks > kvCapacity_) {
    e.param = "max_tokens";
    e.message = "the request needs " + std::to_string(blocks) +
                " K/V blocks, more than the " + std::to_string(kvCapacity_) +
                " the server's --kv-memory holds";
    return false;
  }
  job = std::make_shared<Job>();
  job->request = r;
  job->prompt = std::move(ids);
  job->gen = settingsOf(r, maxTokens);
  job->arrival = secondsNow();
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_) {
    e.status = 503;
    e.type = "server_error";
    e.message = "the server is shutting down";
    return false;
  }
  if (outstanding_ >=
      replicas_ * prog_.generation.maxBatch + options_.maxQueue) {
    e.status = 429;
    e.type = "rate_limit_error";
    e.message = "the queue is full (--max-queue " +
                std::to_string(options_.maxQueue) + "): try again later";
    return false;
  }
  ++outstanding_;
  ++handlers_;
  pending_.push_back(job);
  return true;
}

CompletionState Server::stateOf(const Job &job) {
  CompletionState c;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    c.id =
        (job.request.chat ? "chatcmpl-" : "cmpl-") + std::to_string(++serial_);
  }
  c.chat = job.request.chat;
  c.model = model_;
  c.created = int64_t(std::time(nullptr));
  c.logprobs = job.request.logprobs >= 0;
  c.promptTokens = int64_t(job.prompt.size());
  return c;
}

void Server::cancel(Job &job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job.cancel = true;
  }
  cv_.notify_all();
}

/// The earliest match of one of `stops` in `text`, or npos.
size_t findStop(const std::string &text,
                const std::vector<std::string> &stops) {
  size_t at = std::string::npos;
  for (const std::string &s : stops)
    at = std::min(at, text.find(s));
  return at;
}

bool Server::follow(Job &job, CompletionState &state, size_t &seen,
                    double &lastToken) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto moved = [&] {
    if (!job.out)
      return job.dropped;
    std::lock_guard<std::mutex> out(job.out->mutex);
    return job.out->generated.size() > seen || job.out->finished;
  };
  cv_.wait_for(lock, std::chrono::milliseconds(200), moved);
  if (!job.out)
    return job.dropped;
  std::shared_ptr<RequestOutput> out = job.out;
  lock.unlock();
  std::vector<int64_t> ids;
  bool finished;
  {
    std::lock_guard<std::mutex> l(out->mutex);
    ids.assign(out->generated.begin(), out->generated.end());
    finished = out->finished;
    state.finishReason = finished ? out->finishReason : "";
    for (size_t i = state.tokenLogprobs.size(); i < out->tokenLogprobs.size();
         ++i)
      state.tokenLogprobs.push_back(out->tokenLogprobs[i]);
    for (size_t i = state.topLogprobs.size(); i < out->topLogprobs.size();
         ++i) {
      std::vector<std::pair<std::string, float>> top;
      for (auto [id, lp] : out->topLogprobs[i])
        top.emplace_back(prog_.prompts.tokenizer->decode({id}), lp);
      state.topLogprobs.push_back(std::move(top));
    }
  }
  const Tokenizer &tok = *prog_.prompts.tokenizer;
  double now = secondsNow();
  for (size_t i = seen; i < ids.size(); ++i) {
    if (i == 0)
      metrics_.firstToken(now - job.arrival);
    else
      metrics_.interToken(i == seen ? now - lastToken : 0.0);
    if (state.logprobs)
      state.tokenTexts.push_back(tok.decode({ids[i]}));
  }
  if (ids.size() > seen)
    lastToken = now;
  seen = ids.size();
  state.completionTokens = int64_t(ids.size());
  appendText(tok, ids, job, state.text, finished);
  size_t stop = findStop(state.text, job.request.stop);
  if (stop != std::string::npos) {
    state.text.resize(stop);
    state.finishReason = "stop";
    if (!finished)
      cancel(job);
    return true;
  }
  return finished;
}

/// The whole response, once the job is over; a client that closed its
/// connection meanwhile cancels the job (checked at each follow(), at most
/// 200 ms apart), whose response then goes nowhere.
std::string Server::respondWhole(Job &job, CompletionState &state,
                                 const httplib::Request &req) {
  int socket =
      findConnectionSocket({req.remote_addr, req.remote_port, req.local_port});
  size_t seen = 0;
  double last = 0;
  while (!follow(job, state, seen, last)) {
    if (socket >= 0 && peerClosed(socket)) {
      cancel(job); // the client went away
      break;
    }
  }
  return completionResponse(state);
}

/// The bytes of `text` a stream may send while the request runs: not the
/// tail that could begin a stop string, nor half of a character. (An
/// unfinished character never reaches `text` while it runs: appendText
/// holds it back.)
size_t sendable(const std::string &text,
                const std::vector<std::string> &stops) {
  size_t hold = 0;
  for (const std::string &s : stops)
    hold = std::max(hold, s.size() - 1);
  size_t limit = text.size() > hold ? text.size() - hold : 0;
  while (limit > 0 && limit < text.size() && (text[limit] & 0xC0) == 0x80)
    --limit;
  return limit;
}

bool Server::stream(Job &job, CompletionState &state, httplib::DataSink &sink) {
  size_t seen = 0, sent = 0, tokensSent = 0;
  double last = 0;
  if (state.chat) {
    // A chat stream opens with the assistant's role.
    std::string open = completionChunk(state, "", 0, 0);
    if (!sink.write(open.data(), open.size())) {
      cancel(job);
      return false;
    }
  }
  for (bool over = false; !over;) {
    over = follow(job, state, seen, last);
    size_t limit =
        over ? state.text.size() : sendable(state.text, job.request.stop);
    if (limit <= sent && !over)
      continue;
    std::string delta =
        limit > sent ? state.text.substr(sent, limit - sent) : "";
    std::string chunk = completionChunk(state, delta, tokensSent, seen);
    if (!sink.write(chunk.data(), chunk.size())) {
      cancel(job); // the client went away
      return false;
    }
    sent = std::max(sent, limit);
    tokensSent = seen;
  }
  std::string tail =
      (job.request.includeUsage ? usageChunk(state) : "") + doneChunk();
  if (!sink.write(tail.data(), tail.size()))
    return false;
  sink.done();
  return true;
}

void Server::finishMetrics(const Job &job, const CompletionState &state) {
  metrics_.request(200);
  int64_t cached = 0;
  if (job.out) {
    std::lock_guard<std::mutex> lock(job.out->mutex);
    cached = job.out->prefixRows;
  }
  metrics_.tokens(int64_t(job.prompt.size()), state.completionTokens, cached);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --outstanding_;
    --handlers_;
  }
  cv_.notify_all();
}

void Server::completions(const httplib::Request &req, httplib::Response &res,
                         bool chat) {
  const char *what =
      chat ? "POST /v1/chat/completions" : "POST /v1/completions";
  if (!authorized(req, res))
    return;
  CompletionRequest r;
  ApiError e;
  std::shared_ptr<Job> job;
  if (!parseCompletionRequest(req.body, r, e, chat) || !admit(r, job, e))
    return fail(res, e, what);
  auto state = std::make_shared<CompletionState>(stateOf(*job));
  if (!r.stream) {
    res.set_content(respondWhole(*job, *state, req), "application/json");
    return finishMetrics(*job, *state);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, state](size_t, httplib::DataSink &sink) {
        return stream(*job, *state, sink);
      },
      [this, job, state](bool) { finishMetrics(*job, *state); });
}
} // namespace

int mfrt::serve::serveProgram(const Options &options, Program &prog,
                              mfrt_options &launch) {
  Server server(options, prog);
  prog.source = &server;
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGTERM, onStopSignal);
  std::signal(SIGINT, onStopSignal);
  server.start();
  std::atomic<bool> over{false};
  std::thread watcher([&] {
    while (!over && !gStopAsked)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (gStopAsked)
      server.drain();
  });
  mfrt_status launched = mfrt_launch(&launch, rankMain, nullptr);
  over = true;
  watcher.join();
  server.stop();
  prog.source = nullptr;
  if (launched != MFRT_OK)
    die(mfrt_last_error());
  if (!options.quiet)
    std::printf("drained: every request answered; stopped\n");
  return 0;
}
