//===- ExpertPlacement.cpp - which experts each EP rank holds -------------===//

#include "meshfold/Support/ExpertPlacement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

using namespace meshfold;

ExpertPlacement ExpertPlacement::contiguous(int64_t numExperts, int64_t ep) {
  ExpertPlacement p;
  p.ep = ep;
  p.numExperts = numExperts;
  p.slots = ep > 0 ? numExperts / ep : 0;
  p.experts.resize(size_t(numExperts));
  std::iota(p.experts.begin(), p.experts.end(), int64_t(0));
  return p;
}

ExpertPlacement ExpertPlacement::fromTable(int64_t numExperts, int64_t ep,
                                           std::vector<int64_t> experts) {
  ExpertPlacement p;
  p.ep = ep;
  p.numExperts = numExperts;
  p.slots = ep > 0 ? int64_t(experts.size()) / ep : 0;
  p.experts = std::move(experts);
  return p;
}

std::vector<int64_t> ExpertPlacement::replicasOf(int64_t expert) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < experts.size(); ++i)
    if (experts[i] == expert)
      out.push_back(int64_t(i));
  return out;
}

std::string ExpertPlacement::check() const {
  if (ep < 1 || slots < 1 || numExperts < 1 ||
      int64_t(experts.size()) != ep * slots)
    return "it must list " + std::to_string(ep) +
           " ranks of the same number "
           "of experts";
  std::vector<bool> placed(size_t(numExperts), false);
  for (int64_t c = 0; c < ep; ++c) {
    std::set<int64_t> onRank;
    for (int64_t s = 0; s < slots; ++s) {
      int64_t e = experts[size_t(c * slots + s)];
      if (e < 0 || e >= numExperts)
        return "it names expert " + std::to_string(e) + ", but the model has " +
               std::to_string(numExperts) + " experts";
      if (!onRank.insert(e).second)
        return "it places expert " + std::to_string(e) + " twice on EP rank " +
               std::to_string(c);
      placed[size_t(e)] = true;
    }
  }
  for (int64_t e = 0; e < numExperts; ++e)
    if (!placed[size_t(e)])
      return "it places no replica of expert " + std::to_string(e);
  return "";
}

std::vector<double>
ExpertPlacement::rankRows(const std::vector<double> &rows) const {
  std::vector<double> replicas(size_t(numExperts), 0.0);
  for (int64_t e : experts)
    replicas[size_t(e)] += 1;
  std::vector<double> out(size_t(ep), 0.0);
  for (size_t i = 0; i < experts.size(); ++i) {
    int64_t e = experts[i];
    if (size_t(e) < rows.size())
      out[i / size_t(slots)] += rows[size_t(e)] / replicas[size_t(e)];
  }
  return out;
}

double meshfold::maxOverMean(const std::vector<double> &rows) {
  if (rows.empty())
    return 1;
  double sum = std::accumulate(rows.begin(), rows.end(), 0.0);
  if (sum <= 0)
    return 1;
  return *std::max_element(rows.begin(), rows.end()) /
         (sum / double(rows.size()));
}

std::string meshfold::placementRule(int64_t numExperts, int64_t ep,
                                    int64_t redundant) {
  if (redundant < 0)
    return "--redundant-experts must be 0 or more, got " +
           std::to_string(redundant);
  if ((numExperts + redundant) % ep != 0)
    return "EP=" + std::to_string(ep) +
           " must divide n_experts + "
           "--redundant-experts (" +
           std::to_string(numExperts) + " + " + std::to_string(redundant) +
           "): every EP rank holds as many experts";
  if (redundant > numExperts * (ep - 1))
    return "--redundant-experts " + std::to_string(redundant) +
           " exceeds n_experts x (EP - 1) = " +
           std::to_string(numExperts * (ep - 1)) +
           ": an expert has at most one replica per EP rank";
  return "";
}

namespace {
/// Whether `rank` (its experts) holds `expert`.
bool holds(const std::vector<int64_t> &rank, int64_t expert) {
  return std::find(rank.begin(), rank.end(), expert) != rank.end();
}

/// The node of EP coordinate `c` (`nodeOf` empty: one node).
int64_t nodeOfRank(const std::vector<int64_t> &nodeOf, int64_t c) {
  return nodeOf.empty() ? 0 : nodeOf[size_t(c)];
}

/// Where every rank with a free slot holds `expert` already: moves another
/// expert from a full rank without `expert` to a free rank that lacks it, and
/// returns the rank so freed (the slots add up to the replicas, and an
/// expert has at most one replica per rank, so such a move exists).
int64_t makeRoom(std::vector<std::vector<int64_t>> &held,
                 std::vector<double> &load, const std::vector<double> &share,
                 int64_t slots, int64_t expert) {
  const int64_t ep = int64_t(held.size());
  for (int64_t free = 0; free < ep; ++free) {
    if (int64_t(held[size_t(free)].size()) == slots)
      continue;
    for (int64_t full = 0; full < ep; ++full) {
      if (holds(held[size_t(full)], expert))
        continue;
      for (size_t i = 0; i < held[size_t(full)].size(); ++i) {
        int64_t f = held[size_t(full)][i];
        if (holds(held[size_t(free)], f))
          continue;
        held[size_t(full)].erase(held[size_t(full)].begin() + long(i));
        held[size_t(free)].push_back(f);
        load[size_t(full)] -= share[size_t(f)];
        load[size_t(free)] += share[size_t(f)];
        return full;
      }
    }
  }
  return 0;
}
} // namespace

std::vector<int64_t>
meshfold::localReplicas(const std::vector<int64_t> &slots,
                        const std::vector<int64_t> &nodeOfSlot, int64_t node) {
  std::map<int64_t, int64_t> perNode;
  for (int64_t n : nodeOfSlot)
    perNode[n] = 0;
  for (int64_t s : slots)
    ++perNode[nodeOfSlot[size_t(s)]];
  int64_t first = perNode.begin()->second;
  for (const auto &entry : perNode)
    if (entry.second != first || first == 0)
      return slots;
  std::vector<int64_t> local;
  for (int64_t s : slots)
    if (nodeOfSlot[size_t(s)] == node)
      local.push_back(s);
  return local.empty() ? slots : local;
}

namespace {
/// Lowers the busiest rank's load by swapping one of its replicas with one
/// of another rank's, the swap that lowers the larger of the two loads the
/// most, while one does (every rank is full: a swap keeps the slot counts).
/// Across nodes only experts of one replica move, so that the replicas of
/// the others keep their spread over the nodes.
void refineBySwaps(std::vector<std::vector<int64_t>> &held,
                   std::vector<double> &load, const std::vector<double> &share,
                   const std::vector<int64_t> &replicas,
                   const std::vector<int64_t> &nodeOf) {
  const int64_t ep = int64_t(held.size());
  for (int64_t round = 0; round < 64 * ep; ++round) {
    int64_t b =
        int64_t(std::max_element(load.begin(), load.end()) - load.begin());
    double best = load[size_t(b)] * (1 - 1e-9);
    int64_t bestO = -1;
    size_t bestX = 0, bestY = 0;
    for (int64_t o = 0; o < ep; ++o)
      for (size_t x = 0; o != b && x < held[size_t(b)].size(); ++x)
        for (size_t y = 0; y < held[size_t(o)].size(); ++y) {
          int64_t ex = held[size_t(b)][x], ey = held[size_t(o)][y];
          if (holds(held[size_t(o)], ex) || holds(held[size_t(b)], ey) ||
              (nodeOfRank(nodeOf, o) != nodeOfRank(nodeOf, b) &&
               (replicas[size_t(ex)] > 1 || replicas[size_t(ey)] > 1)))
            continue;
          double delta = share[size_t(ex)] - share[size_t(ey)];
          double worse =
              std::max(load[size_t(b)] - delta, load[size_t(o)] + delta);
          if (worse < best) {
            best = worse;
            bestO = o;
            bestX = x;
            bestY = y;
          }
        }
    if (bestO < 0)
      return;
    int64_t &ex = held[size_t(b)][bestX], &ey = held[size_t(bestO)][bestY];
    double delta = share[size_t(ex)] - share[size_t(ey)];
    load[size_t(b)] -= delta;
    load[size_t(bestO)] += delta;
    std::swap(ex, ey);
  }
}
} // namespace

ExpertPlacement meshfold::balanceExperts(const std::vector<double> &rows,
                                         int64_t ep, int64_t redundant,
                                         const std::vector<int64_t> &nodeOf) {
  const int64_t numExperts = int64_t(rows.size());
  ExpertPlacement p;
  p.ep = ep;
  p.numExperts = numExperts;
  p.slots = (numExperts + redundant) / ep;
  // Replicas: each extra one to the expert with the most rows per replica
  // that still has a rank without it (lowest id on ties).
  std::vector<int64_t> replicas(size_t(numExperts), 1);
  for (int64_t r = 0; r < redundant; ++r) {
    int64_t best = -1;
    for (int64_t e = 0; e < numExperts; ++e)
      if (replicas[size_t(e)] < ep &&
          (best < 0 || rows[size_t(e)] * double(replicas[size_t(best)]) >
                           rows[size_t(best)] * double(replicas[size_t(e)])))
        best = e;
    ++replicas[size_t(best)];
  }
  // The replicas, heaviest share first (expert id, then replica, on ties).
  struct Unit {
    double load;
    int64_t expert;
  };
  std::vector<Unit> units;
  std::vector<double> share(rows.size());
  for (int64_t e = 0; e < numExperts; ++e) {
    share[size_t(e)] = rows[size_t(e)] / double(replicas[size_t(e)]);
    for (int64_t m = 0; m < replicas[size_t(e)]; ++m)
      units.push_back({share[size_t(e)], e});
  }
  std::stable_sort(
      units.begin(), units.end(),
      [](const Unit &a, const Unit &b) { return a.load > b.load; });
  std::vector<double> load(size_t(ep), 0.0);
  std::vector<std::vector<int64_t>> held(static_cast<size_t>(ep));
  // Replicas of each expert per node so far.
  std::map<std::pair<int64_t, int64_t>, int64_t> onNode;
  for (const Unit &u : units) {
    int64_t best = -1;
    auto key = [&](int64_t c) {
      return std::make_pair(onNode[{u.expert, nodeOfRank(nodeOf, c)}],
                            load[size_t(c)]);
    };
    for (int64_t c = 0; c < ep; ++c) {
      const std::vector<int64_t> &h = held[size_t(c)];
      if (int64_t(h.size()) == p.slots || holds(h, u.expert))
        continue;
      if (best < 0 || key(c) < key(best))
        best = c;
    }
    if (best < 0)
      best = makeRoom(held, load, share, p.slots, u.expert);
    held[size_t(best)].push_back(u.expert);
    load[size_t(best)] += u.load;
    ++onNode[{u.expert, nodeOfRank(nodeOf, best)}];
  }
  refineBySwaps(held, load, share, replicas, nodeOf);
  // Each rank's experts in ascending order (its weights load in file order).
  for (std::vector<int64_t> &h : held) {
    std::sort(h.begin(), h.end());
    p.experts.insert(p.experts.end(), h.begin(), h.end());
  }
  return p;
}
