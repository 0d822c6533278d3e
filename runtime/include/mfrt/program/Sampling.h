//===- Sampling.h - The next token from a step's logits ---------*- C++ -*-===//
//
// What happens after prefill (--max-new-tokens and the sampling flags), and
// the rule that picks each generated token (Sampling.cpp; the README's).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_SAMPLING_H
#define MFRT_PROGRAM_SAMPLING_H

#include <cstdint>

namespace mfrt {

/// What happens after prefill: up to `maxNewTokens` tokens per request,
/// greedy when `temperature` is 0, else drawn (after top-k and top-p) with
/// the counter-based generator keyed by (seed, request, step).
struct Generation {
  int64_t maxNewTokens = 0;
  double temperature = 0.0, topP = 1.0;
  int64_t topK = 0;
  /// The most requests a DP replica decodes together (0: all of them), and
  /// the most decode steps (micro-batches) a replica has in flight through
  /// the pipeline stages (0: one per stage).
  int64_t maxBatch = 0, microBatches = 1;
  /// --prefill-chunk: prompts run through decode steps in chunks of at most
  /// this many rows, beside the running requests' rows (0: each prompt's
  /// prefill is one call of the prefill function).
  int64_t prefillChunk = 0;
  /// --max-step-tokens: the most rows a decode step computes, its decoding
  /// requests' tokens first, then prompts' chunks (0: no bound; serving
  /// takes a default unless it is given).
  int64_t stepTokens = 0;
  bool stepTokensGiven = false;
  /// Whether prompts run through decode steps in chunks: --prefill-chunk,
  /// or --max-step-tokens (chunks of its budget).
  bool chunkedPrompts() const { return prefillChunk > 0 || stepTokens > 0; }
  uint64_t seed = 0;
  /// A served request's logprobs: -1 none, else the chosen token's and the
  /// this many most likely alternatives' (at most kTopLogprobs).
  int64_t logprobs = -1;
  bool seedGiven = false, ignoreEos = false, stepLogits = false;
};

/// The token chosen from `logits [vocab]` for step `step` of request
/// `request`.
int64_t chooseToken(const Generation &g, const float *logits, int64_t vocab,
                    int64_t request, int64_t step);

} // namespace mfrt

#endif // MFRT_PROGRAM_SAMPLING_H
