//===- HFBPE.cpp - The BPE model of tokenizer.json ------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The `model` of a tokenizer.json, the only model type implemented (BPE;
// WordPiece, Unigram and WordLevel are refused): its vocabulary and merges,
// and a word to ids. A word starts as its characters' ids (byte tokens
// `<0xHH>` with byte fallback, else unk for characters outside the
// vocabulary), then merges are applied lowest rank first, leftmost first
// among equals, as HF's BPE::merge_word and Word::merge_all do.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

#include <algorithm>
#include <cstdio>
#include <queue>

using namespace mfrt;
using namespace mfrt::hf;

//===----------------------------------------------------------------------===//
// Reading `model`
//===----------------------------------------------------------------------===//

void BpeModel::readOptions(const json &model) {
  std::string type = stringField(model, "type", "model", "BPE");
  if (type != "BPE")
    fail("model.type '" + type +
         "' is not supported (BPE; WordPiece, Unigram and WordLevel are not)");
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail("model.dropout: BPE dropout is not supported");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!stringField(model, key, "model").empty())
      fail(std::string("model.") + key + " is not supported");
  byteFallback = boolField(model, "byte_fallback", "model", false);
  fuseUnk = boolField(model, "fuse_unk", "model", false);
  ignoreMerges = boolField(model, "ignore_merges", "model", false);
}

int64_t BpeModel::readVocab(const json &model) {
  const json &list = objectField(model, "vocab", "model");
  int64_t size = 0;
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= (int64_t(1) << 24))
      fail("model.vocab['" + it.key() + "'] is not an id from 0 to 2^24-1");
    int64_t id = it.value().get<int64_t>();
    vocab[it.key()] = id;
    size = std::max(size, id + 1);
  }
  return size;
}

void BpeModel::readUnk(const json &model) {
  std::string token = stringField(model, "unk_token", "model");
  if (token.empty())
    return;
  auto it = vocab.find(token);
  if (it == vocab.end())
    fail("model.unk_token '" + token + "' is not in the vocabulary");
  unk = it->second;
}

namespace {

/// The two tokens of a merge, `"a b"` or `["a", "b"]`.
std::pair<std::string, std::string> mergeTokens(const json &entry,
                                                const std::string &where) {
  if (entry.is_string()) {
    std::string s = entry.get<std::string>();
    size_t space = s.find(' ');
    if (space == std::string::npos ||
        s.find(' ', space + 1) != std::string::npos)
      fail(where + " is not two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
      entry[1].is_string())
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  fail(where + " is not \"a b\" or [\"a\", \"b\"]");
}

} // namespace

void BpeModel::readMerges(const json &model) {
  const json &list = arrayField(model, "merges", "model");
  for (size_t rank = 0; rank < list.size(); ++rank) {
    std::string where = "model.merges[" + std::to_string(rank) + "]";
    auto [left, right] = mergeTokens(list[rank], where);
    auto a = vocab.find(left), b = vocab.find(right),
         ab = vocab.find(left + right);
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end())
      fail(where + ": '" +
           (a == vocab.end()   ? left
            : b == vocab.end() ? right
                               : left + right) +
           "' is not in the vocabulary");
    // The first of two merges of the same pair is the one that counts.
    merges.emplace(pairKey(a->second, b->second),
                   std::make_pair(int64_t(rank), ab->second));
  }
}

//===----------------------------------------------------------------------===//
// A word to ids
//===----------------------------------------------------------------------===//

namespace {

/// A token of the word being merged, in a linked list of its tokens.
struct Symbol {
  int64_t id;
  int64_t prev, next;
  bool alive;
};

/// The byte tokens of \p ch, or fewer than its bytes when one is missing.
std::vector<int64_t> byteIds(const BpeModel &m, const std::string &ch) {
  std::vector<int64_t> ids;
  for (char c : ch) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)c);
    auto b = m.vocab.find(name);
    if (b == m.vocab.end())
      break;
    ids.push_back(b->second);
  }
  return ids;
}

/// The symbols \p word starts as, one a character.
std::vector<Symbol> symbolsOf(const BpeModel &m, const std::string &word) {
  std::vector<Symbol> symbols;
  auto add = [&](int64_t id) {
    int64_t index = int64_t(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool pendingUnk = false;
  for (size_t i = 0, n = 0; i < word.size(); i += n) {
    n = unicode::charLength(word, i);
    std::string ch = word.substr(i, n);
    auto it = m.vocab.find(ch);
    if (it != m.vocab.end()) {
      if (pendingUnk)
        add(m.unk);
      pendingUnk = false;
      add(it->second);
      continue;
    }
    if (m.byteFallback) {
      std::vector<int64_t> ids = byteIds(m, ch);
      if (ids.size() == ch.size()) {
        // Like HF, a pending unk is not flushed before byte tokens.
        for (int64_t id : ids)
          add(id);
        continue;
      }
    }
    if (m.unk >= 0) {
      if (pendingUnk && !m.fuseUnk)
        add(m.unk);
      pendingUnk = true;
    }
  }
  if (pendingUnk)
    add(m.unk);
  if (!symbols.empty())
    symbols.back().next = -1;
  return symbols;
}

/// Applies the merges to \p symbols, lowest rank first, leftmost first among
/// equals; merged symbols are left dead in place.
void mergeAll(const BpeModel &m, std::vector<Symbol> &symbols) {
  struct Merge {
    int64_t pos, rank, id;
    bool operator<(const Merge &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Merge> queue;
  auto consider = [&](int64_t pos) {
    if (pos < 0 || symbols[size_t(pos)].next < 0)
      return;
    auto it = m.merges.find(
        BpeModel::pairKey(symbols[size_t(pos)].id,
                          symbols[size_t(symbols[size_t(pos)].next)].id));
    if (it != m.merges.end())
      queue.push({pos, it->second.first, it->second.second});
  };
  for (int64_t i = 0; i + 1 < int64_t(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol &s = symbols[size_t(top.pos)];
    if (!s.alive || s.next < 0)
      continue;
    Symbol &right = symbols[size_t(s.next)];
    // A queued merge whose pair has changed since is stale.
    auto it = m.merges.find(BpeModel::pairKey(s.id, right.id));
    if (it == m.merges.end() || it->second.second != top.id)
      continue;
    s.id = top.id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0)
      symbols[size_t(s.next)].prev = top.pos;
    consider(s.prev);
    consider(top.pos);
  }
}

} // namespace

void BpeModel::encode(const std::string &word,
                      std::vector<int64_t> &ids) const {
  if (ignoreMerges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> symbols = symbolsOf(*this, word);
  mergeAll(*this, symbols);
  for (const Symbol &s : symbols)
    if (s.alive)
      ids.push_back(s.id);
}
