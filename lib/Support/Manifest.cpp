//===- Manifest.cpp - The compiled model's manifest -----------------------===//

#include "meshfold/Support/Manifest.h"

#include <sstream>

using namespace meshfold;

std::vector<int64_t> meshfold::ManifestParam::globalShape() const {
  std::vector<int64_t> global = shape;
  for (const ManifestShard &shard : shards)
    global[size_t(shard.dim)] *= shard.parts;
  if (placedLayer >= 0)
    global[0] = placedExperts;
  return global;
}

std::string meshfold::ManifestParam::expertName(int64_t e) const {
  std::string out = name;
  size_t at = out.find("{e}");
  if (at != std::string::npos)
    out.replace(at, 3, std::to_string(e));
  return out;
}

std::string meshfold::formatManifest(const Manifest &m) {
  std::ostringstream os;
  os << "meshfold-manifest 1\n"
     << "entry " << m.entry << "\n"
     << "hidden " << m.hidden << "\n"
     << "vocab " << m.vocab << "\n"
     << "layers " << m.layers << "\n"
     << "heads " << m.heads << "\n"
     << "kv_heads " << m.kvHeads << "\n"
     << "head_dim " << m.headDim << "\n"
     << "experts " << m.experts << "\n"
     << "top_k " << m.topK << "\n"
     << "ffn " << m.ffn << "\n";
  if (m.maxPositions > 0)
    os << "max_positions " << m.maxPositions << "\n";
  if (m.moeLayers > 0)
    os << "moe_layers " << m.moeLayers << "\n";
  if (m.narrowedLast)
    os << "narrowed_last 1\n";
  if (m.kvShared)
    os << "kv_shared 1\n";
  if (m.promptLogits)
    os << "prompt_logits 1\n";
  if (m.historyTile > 1)
    os << "history_tile " << m.historyTile << "\n";
  if (m.projNorms)
    os << "proj_norms 1\n";
  if (!m.decode.empty())
    os << "decode " << m.decode << "\n";
  if (!m.eosTokens.empty()) {
    os << "eos";
    for (int64_t id : m.eosTokens)
      os << " " << id;
    os << "\n";
  }
  if (!m.plan.empty())
    os << "plan " << m.plan << "\n";
  for (size_t i = 0; i < m.groups.size(); ++i)
    os << "group " << i << " " << m.groups[i].mesh << ":" << m.groups[i].axes
       << "\n";
  for (const ManifestParam &p : m.params) {
    os << "param " << p.id << " " << p.name << " " << (p.bf16 ? "bf16" : "f32")
       << " " << p.shape.size();
    for (int64_t d : p.shape)
      os << " " << d;
    for (const ManifestShard &shard : p.shards)
      os << " shard " << shard.dim << " " << shard.mesh << " " << shard.axis
         << " " << shard.parts;
    if (p.placedLayer >= 0)
      os << " placed " << p.placedLayer << " " << p.placedExperts;
    if (!p.stages.empty()) {
      os << " stages";
      for (int64_t st : p.stages)
        os << " " << st;
    }
    os << "\n";
  }
  for (const auto &[layer, p] : m.placements) {
    os << "placement " << layer << " " << p.ep << " " << p.slots << " "
       << p.numExperts;
    for (int64_t e : p.experts)
      os << " " << e;
    os << "\n";
  }
  os << "end\n";
  return os.str();
}

namespace {

/// Reads the fields after a param's shape (`rank` dims) into `p`: its
/// shards and stages. Returns the error, or "".
std::string parseParamFields(std::istringstream &ls, int64_t rank,
                             ManifestParam &p) {
  std::string word;
  while (ls >> word) {
    if (word == "shard") {
      ManifestShard shard;
      if (!(ls >> shard.dim >> shard.mesh >> shard.axis >> shard.parts) ||
          shard.dim < 0 || shard.dim >= rank || shard.parts < 1)
        return "malformed shard of param '" + p.name + "'";
      for (const ManifestShard &other : p.shards)
        if (other.dim == shard.dim)
          return "param '" + p.name + "' is split twice along dim " +
                 std::to_string(shard.dim);
      p.shards.push_back(shard);
    } else if (word == "placed") {
      if (!(ls >> p.placedLayer >> p.placedExperts) || p.placedLayer < 0 ||
          p.placedExperts < 1 || rank < 1)
        return "malformed placement of param '" + p.name + "'";
    } else if (word == "stages") {
      int64_t st;
      while (ls >> st)
        p.stages.push_back(st);
    } else {
      return "unknown field '" + word + "' of param '" + p.name + "'";
    }
  }
  return "";
}

/// Reads a `param` line (after its key) and appends the param to `out`.
/// Returns the error, or "".
std::string parseParam(std::istringstream &ls, Manifest &out) {
  ManifestParam p;
  std::string dtype;
  int64_t rank = 0;
  if (!(ls >> p.id >> p.name >> dtype >> rank) || rank < 0)
    return "malformed param entry";
  if (dtype != "f32" && dtype != "bf16")
    return "param '" + p.name + "' has storage dtype '" + dtype +
           "', expected f32 or bf16";
  p.bf16 = dtype == "bf16";
  // Weights have a few dims: a larger rank is a corrupt entry (not a
  // reason to allocate).
  if (rank > 8)
    return "param '" + p.name + "' has rank " + std::to_string(rank) +
           " (at most 8)";
  for (int64_t i = 0, d = 0; i < rank; ++i) {
    if (!(ls >> d) || d < 0)
      return "malformed shape of param '" + p.name + "'";
    p.shape.push_back(d);
  }
  if (std::string why = parseParamFields(ls, rank, p); !why.empty())
    return why;
  if (p.id != int64_t(out.params.size()))
    return "param ids must be dense and in order";
  out.params.push_back(std::move(p));
  return "";
}

/// Reads a `placement` line (after its key) into out.placements. Returns
/// the error, or "".
std::string parsePlacement(std::istringstream &ls, Manifest &out) {
  int64_t layer = -1;
  ExpertPlacement p;
  if (!(ls >> layer >> p.ep >> p.slots >> p.numExperts) || layer < 0 ||
      p.ep < 1 || p.slots < 1 || p.ep * p.slots > (int64_t(1) << 24))
    return "malformed placement entry";
  for (int64_t e; ls >> e;)
    p.experts.push_back(e);
  if (std::string why = p.check(); !why.empty())
    return "the placement of layer " + std::to_string(layer) +
           " is malformed: " + why;
  if (!out.placements.emplace(layer, std::move(p)).second)
    return "layer " + std::to_string(layer) + " is placed twice";
  return "";
}

/// Sets the integer field `key` of `out`; unknown keys are ignored so newer
/// compilers stay readable.
void setNumber(Manifest &out, const std::string &key, int64_t value) {
  if (key == "hidden")
    out.hidden = value;
  else if (key == "vocab")
    out.vocab = value;
  else if (key == "layers")
    out.layers = value;
  else if (key == "heads")
    out.heads = value;
  else if (key == "kv_heads")
    out.kvHeads = value;
  else if (key == "head_dim")
    out.headDim = value;
  else if (key == "experts")
    out.experts = value;
  else if (key == "top_k")
    out.topK = value;
  else if (key == "ffn")
    out.ffn = value;
  else if (key == "max_positions")
    out.maxPositions = value;
  else if (key == "moe_layers")
    out.moeLayers = value;
  else if (key == "narrowed_last")
    out.narrowedLast = value != 0;
  else if (key == "prompt_logits")
    out.promptLogits = value != 0;
  else if (key == "history_tile")
    out.historyTile = value;
  else if (key == "kv_shared")
    out.kvShared = value != 0;
  else if (key == "proj_norms")
    out.projNorms = value != 0;
}

/// Reads the entry `key` (the rest of its line in `ls`) into `out`. Returns
/// the error, or "".
std::string parseEntry(const std::string &key, std::istringstream &ls,
                       Manifest &out) {
  if (key == "entry") {
    ls >> out.entry;
    return "";
  }
  if (key == "plan") {
    std::getline(ls >> std::ws, out.plan);
    return "";
  }
  if (key == "decode") {
    ls >> out.decode;
    return "";
  }
  if (key == "eos") {
    int64_t id;
    while (ls >> id) {
      if (id < 0)
        return "negative eos token id";
      out.eosTokens.push_back(id);
    }
    return "";
  }
  if (key == "group") {
    int64_t id = -1;
    std::string spec;
    if (!(ls >> id >> spec) || id != int64_t(out.groups.size()) ||
        spec.find(':') == std::string::npos)
      return "malformed group entry";
    out.groups.push_back(
        {spec.substr(0, spec.find(':')), spec.substr(spec.find(':') + 1)});
    return "";
  }
  if (key == "param")
    return parseParam(ls, out);
  if (key == "placement")
    return parsePlacement(ls, out);
  int64_t value = 0;
  if (!(ls >> value))
    return "malformed entry '" + key + "'";
  setNumber(out, key, value);
  return "";
}

} // namespace

bool meshfold::parseManifest(const char *text, Manifest &out,
                             std::string &error) {
  std::istringstream in(text ? text : "");
  std::string line;
  int lineNo = 0;
  bool sawHeader = false, sawEnd = false;
  while (std::getline(in, line)) {
    ++lineNo;
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key.empty())
      continue;
    auto bad = [&](const std::string &why) {
      error = "manifest line " + std::to_string(lineNo) + ": " + why;
      return false;
    };
    if (!sawHeader) {
      int version = 0;
      if (key != "meshfold-manifest" || !(ls >> version) || version != 1)
        return bad("not a meshfold manifest (version 1)");
      sawHeader = true;
      continue;
    }
    if (key == "end") {
      sawEnd = true;
      break;
    }
    if (std::string why = parseEntry(key, ls, out); !why.empty())
      return bad(why);
  }
  if (!sawHeader || !sawEnd) {
    error = "manifest is truncated";
    return false;
  }
  return true;
}
