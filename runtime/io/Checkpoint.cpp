//===- Checkpoint.cpp - A checkpoint of one or many safetensors -----------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Checkpoint.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

using namespace mfrt;

namespace {

constexpr const char *kIndexName = "model.safetensors.index.json";

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string join(const std::string &dir, const std::string &name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool fail(std::string *error, const std::string &what) {
  if (error)
    *error = what;
  return false;
}

/// Reads the index's weight map (tensor name -> shard file name).
bool readIndex(const std::string &path,
               std::map<std::string, std::string> &weightMap,
               std::string *error) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(error, path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  // Nesting is bounded as in the safetensors header: an index is two
  // levels deep.
  int depth = 0;
  auto limit = [&](int d, nlohmann::json::parse_event_t event,
                   nlohmann::json &) {
    if (event == nlohmann::json::parse_event_t::object_start ||
        event == nlohmann::json::parse_event_t::array_start)
      depth = std::max(depth, d);
    return d <= 64;
  };
  nlohmann::json j =
      nlohmann::json::parse(text.str(), limit, /*allow_exceptions=*/false);
  if (j.is_discarded() || depth > 64)
    return fail(error, path + ": not a safetensors index (invalid JSON)");
  if (!j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    return fail(error,
                path + ": not a safetensors index (no \"weight_map\" object)");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      return fail(error, path + ": weight_map entry '" + it.key() +
                             "' is not a shard file name");
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
        shard == "..")
      return fail(error, path + ": weight_map entry '" + it.key() +
                             "' names '" + shard +
                             "', which is not a file beside the index");
    weightMap[it.key()] = shard;
  }
  if (weightMap.empty())
    return fail(error, path + ": the index's weight_map names no tensor");
  return true;
}

} // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string &path,
                                             std::string *error,
                                             const std::string &label) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->givenPath = label.empty() ? path : label;
  std::string file = path;
  if (isDirectory(path)) {
    if (exists(join(path, kIndexName)))
      file = join(path, kIndexName);
    else if (exists(join(path, "model.safetensors")))
      file = join(path, "model.safetensors");
    else {
      fail(error, path + ": a checkpoint folder must hold " +
                      std::string(kIndexName) + " or model.safetensors");
      return nullptr;
    }
  }
  if (!endsWith(file, ".json")) {
    std::unique_ptr<SafetensorsFile> one =
        SafetensorsFile::open(file, error, SafetensorsFile::Mapping::Lazy);
    if (!one)
      return nullptr;
    for (const TensorInfo &t : one->tensors())
      ckpt->shardOf[t.name] = 0;
    ckpt->shards.push_back(std::move(one));
    return ckpt;
  }

  std::map<std::string, std::string> weightMap;
  if (!readIndex(file, weightMap, error))
    return nullptr;
  // The shards, in the order the index first names them (tensor names
  // ascending), and the first tensor it puts in each.
  std::map<std::string, size_t> shardIndex;
  std::vector<std::string> shardNames, firstTensor;
  for (const auto &[name, shard] : weightMap)
    if (shardIndex.emplace(shard, shardNames.size()).second) {
      shardNames.push_back(shard);
      firstTensor.push_back(name);
    }
  const std::string dir = dirOf(file);
  for (size_t i = 0; i < shardNames.size(); ++i) {
    const std::string &shard = shardNames[i];
    const std::string shardPath = join(dir, shard);
    if (!exists(shardPath)) {
      fail(error, file + ": shard '" + shard +
                      "' is missing (the index puts '" + firstTensor[i] +
                      "' in it)");
      return nullptr;
    }
    std::unique_ptr<SafetensorsFile> f =
        SafetensorsFile::open(shardPath, error, SafetensorsFile::Mapping::Lazy);
    if (!f)
      return nullptr;
    ckpt->shards.push_back(std::move(f));
  }
  // Every tensor of every shard: named by the index, for this shard, once.
  for (size_t s = 0; s < ckpt->shards.size(); ++s)
    for (const TensorInfo &t : ckpt->shards[s]->tensors()) {
      auto it = weightMap.find(t.name);
      if (it == weightMap.end()) {
        fail(error, ckpt->shards[s]->path() + ": tensor '" + t.name +
                        "' is not in the index " + file);
        return nullptr;
      }
      auto [prev, inserted] = ckpt->shardOf.emplace(t.name, s);
      if (!inserted) {
        fail(error, "tensor '" + t.name + "' is in two shards: " +
                        ckpt->shards[prev->second]->path() + " and " +
                        ckpt->shards[s]->path());
        return nullptr;
      }
      if (shardIndex.at(it->second) != s) {
        fail(error, ckpt->shards[s]->path() + ": tensor '" + t.name +
                        "' is here, but the index puts it in '" + it->second +
                        "'");
        return nullptr;
      }
    }
  for (const auto &[name, shard] : weightMap)
    if (!ckpt->shardOf.count(name)) {
      fail(error, join(dir, shard) + ": lacks tensor '" + name +
                      "', which the index puts in it");
      return nullptr;
    }
  return ckpt;
}

const TensorInfo *Checkpoint::header(const std::string &name) const {
  auto it = shardOf.find(name);
  return it == shardOf.end() ? nullptr : shards[it->second]->find(name);
}

const TensorInfo *Checkpoint::find(const std::string &name,
                                   std::string *error) const {
  auto it = shardOf.find(name);
  if (it == shardOf.end())
    return nullptr;
  if (!shards[it->second]->map(error))
    return nullptr;
  return shards[it->second]->find(name);
}

bool Checkpoint::mapAll(std::string *error) const {
  for (const std::unique_ptr<SafetensorsFile> &s : shards)
    if (!s->map(error))
      return false;
  return true;
}

std::pair<size_t, uint64_t> Checkpoint::mapped() const {
  size_t files = 0;
  uint64_t bytes = 0;
  for (const std::unique_ptr<SafetensorsFile> &s : shards)
    if (s->isMapped()) {
      ++files;
      bytes += s->size();
    }
  return {files, bytes};
}

const std::string &Checkpoint::fileOf(const std::string &name) const {
  auto it = shardOf.find(name);
  return it == shardOf.end() ? givenPath : shards[it->second]->path();
}

std::vector<const TensorInfo *> Checkpoint::tensors() const {
  std::vector<const TensorInfo *> out;
  for (const std::unique_ptr<SafetensorsFile> &s : shards)
    for (const TensorInfo &t : s->tensors())
      out.push_back(&t);
  return out;
}
