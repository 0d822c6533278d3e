//===- KVTransfer.h - a K/V cache from one mesh to another -*- C++ -*-===//
//
// Prefill and decode on separate pools with different meshes
// (docs/design.md §6): once a request's prefill is done, its K/V cache
// moves from the prefill replica's ranks to the decode replica's, each
// block of (layer, KV heads, prompt positions) sent once from a prefill
// rank that holds it to each decode rank that needs it, in the decode
// mesh's own layout (MeshLayout::kvHeadRange, promptPositions, and the
// stage of each layer). Pure C++ on MeshLayout.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_KVTRANSFER_H
#define MESHFOLD_SUPPORT_KVTRANSFER_H

#include "meshfold/Support/MeshLayout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace meshfold {

/// "" when two meshes can run as separate pools of one launch (a prefill
/// pool, then a decode pool, ranks numbered on): each on whole nodes of its
/// own, with the same GPUs per node; else the broken rule ('pools'), in one
/// line.
std::string checkPools(const MeshLayout &first, const MeshLayout &second);

/// The machine two pools run on (checked by checkPools): the first pool's
/// devices, then the second's, numbered on over whole nodes of the same
/// size, with the first pool's link speeds. Its node, link and localIndex
/// answer for the launch's global ranks; it has no parallel axes.
MeshLayout poolsMachine(const MeshLayout &first, const MeshLayout &second);

/// The ranks of `mesh` whose dp coordinate is `replica` (one DP replica),
/// in rank order.
std::vector<int64_t> replicaRanks(const MeshLayout &mesh, int64_t replica);

/// The request whose cache moves, and where.
struct KVTransferInput {
  int64_t numLayers = 0, numKVHeads = 0, headDim = 0;
  /// The prompt's tokens: positions 0 .. promptLength - 1 move (the first
  /// generated token's K/V is computed by the decode pool's first step).
  int64_t promptLength = 0;
  /// The DP replica of the prefill mesh that ran the prefill, and the one
  /// of the decode mesh that decodes the request.
  int64_t prefillReplica = 0, decodeReplica = 0;
  /// Tensors per cached row: K and V (2), or one that is both (1: MLA's
  /// latent).
  int64_t kvCopies = 2;
};

/// One message of the transfer: K and V of layer `layer`, KV heads
/// [headBegin, headEnd), prompt positions [positionBegin, positionEnd),
/// from prefill rank `from` to decode rank `to` (ranks of their own meshes).
struct KVBlock {
  int64_t from = 0, to = 0, layer = 0;
  int64_t headBegin = 0, headEnd = 0, positionBegin = 0, positionEnd = 0;
  /// The tensors it carries: K then V (2), or the one that is both (1).
  int64_t kvCopies = 2;
  /// K's and V's elements: kvCopies * heads * positions * headDim.
  int64_t elements(int64_t headDim) const {
    return kvCopies * (headEnd - headBegin) * (positionEnd - positionBegin) *
           headDim;
  }
};

/// The transfer plan of one request, ordered by layer (so that a prefill
/// stage can send its layers as soon as it is done), then by decode rank,
/// then by prefill rank. For every decode rank of the decode replica, every
/// element of its share of the cache (its stage's layers, its KV heads, its
/// prompt positions) arrives in exactly one block, from a prefill rank of
/// the prefill replica that holds it; where TP > n_kv on the prefill mesh
/// replicates a head, its holders take turns by the decode rank's TP
/// coordinate. Returns false and sets *error (one line, naming the mesh
/// and the rule) when either layout cannot hold the model (rules gqa,
/// pp-layers) or an argument is out of range.
bool planKVTransfer(const MeshLayout &prefill, const MeshLayout &decode,
                    const KVTransferInput &in, std::vector<KVBlock> &blocks,
                    std::string *error);

/// The fewest K/V elements any transfer can move: every element crosses once
/// per decode rank that holds it, kvCopies * T * n_kv * d_h * layers times the
/// decode mesh's KV-head replication (TP / n_kv where TP > n_kv, else 1).
int64_t kvTransferMinimumElements(const MeshLayout &decode,
                                  const KVTransferInput &in);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_KVTRANSFER_H
